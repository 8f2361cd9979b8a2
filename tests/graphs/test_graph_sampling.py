"""Ego subgraphs equal a brute-force BFS with the same caps; induced subgraphs hold exactly the edges
among their nodes; split ratios and stratification hold."""

import numpy as np
import pytest
import scipy.sparse as sp

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.graphs.sample import EgoSampler, ego_structures, induced_subgraph, priority_py
from gtscale.graphs.splits import mask_split, ratio_split
from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.prep.structure import StructureOptions, structure


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> GraphStore:
    out = tmp_path_factory.mktemp("g") / "store"
    build_store(synthetic_source(3000, 30000, seed=11), out, progress=False)
    return GraphStore.open(out)


def brute_force_ego(indptr, indices, target, fanouts, max_nodes, seed):
    """The same rules as plain Python: BFS by hops, per frontier node the `fanout` unvisited
    neighbours of smallest (priority, id), stop at max_nodes; then every edge among the nodes."""
    nodes, position = [target], {target: 0}
    frontier = [target]
    for cap in fanouts:
        added = []
        for u in frontier:
            fresh = [int(v) for v in indices[indptr[u] : indptr[u + 1]] if int(v) not in position]
            for v in sorted(fresh, key=lambda v: (priority_py(seed, target, v), v))[:cap]:
                if len(nodes) == max_nodes:
                    break
                position[v] = len(nodes)
                nodes.append(v)
                added.append(v)
        frontier = added
    edges = {(position[u], position[int(v)]) for u in nodes for v in indices[indptr[u] : indptr[u + 1]] if int(v) in position}
    return nodes, edges


@pytest.mark.parametrize("fanouts,max_nodes,seed", [((16, 16), 64, 0), ((3, 2), 64, 1), ((5, 4, 3), 40, 7), ((1000,), 2000, 3), ((8, 8), 9, 2)])
def test_ego_equals_brute_force_bfs(store, fanouts, max_nodes, seed):
    rng = np.random.default_rng(seed)
    degree = np.diff(store.indptr)
    targets = np.concatenate([rng.integers(0, store.num_nodes, 40), [int(np.argmax(degree)), int(np.argmin(degree))]])
    sampler = EgoSampler(store.indptr, store.indices, fanouts, max_nodes, seed)
    for sub in sampler.sample(targets):
        nodes, edges = brute_force_ego(store.indptr, store.indices, sub.target, fanouts, max_nodes, seed)
        assert sub.nodes.tolist() == nodes
        assert set(map(tuple, sub.edge_index.T.tolist())) == edges and sub.edge_index.shape[1] == len(edges)
    assert max(len(s.nodes) for s in sampler.sample(targets)) <= max_nodes


def test_ego_depends_only_on_seed_and_target(store):
    a = EgoSampler(store.indptr, store.indices, (8, 4), 32, seed=5).sample([3, 9, 3])
    b = EgoSampler(store.indptr, store.indices, (8, 4), 32, seed=5).sample([9])
    np.testing.assert_array_equal(a[1].nodes, b[0].nodes)
    np.testing.assert_array_equal(a[0].nodes, a[2].nodes)
    c = EgoSampler(store.indptr, store.indices, (8, 4), 32, seed=6).sample([9])
    assert a[0].nodes[0] == 3 and not np.array_equal(b[0].nodes, c[0].nodes)


def test_ego_rejects_targets_outside_the_graph(store):
    sampler = EgoSampler(store.indptr, store.indices, (4,), 8, seed=0)
    for bad in ([store.num_nodes], [-1]):
        with pytest.raises(ValueError, match="target node ids"):
            sampler.sample(bad)


def test_ego_structure_is_the_molecular_structure(store):
    subs = EgoSampler(store.indptr, store.indices, (16, 16), 64, seed=0).sample(np.arange(20))
    options = StructureOptions(svd_rank=8, lap_k=0)
    for sub, st in zip(subs, ego_structures(subs, options)):
        n = len(sub.nodes)
        direct = structure(sub.edge_index.astype(schema.index_dtype(n)), n, options)
        assert set(st) == set(direct)
        for key in st:
            np.testing.assert_array_equal(st[key], direct[key])
        assert st[schema.SPD][0, 0] == 0 and (st[schema.SPD][0, 1:] <= 2).all()  # every node within 2 hops of the target
        np.testing.assert_array_equal(st[schema.IN_DEGREE], np.bincount(sub.edge_index[1], minlength=n))


@pytest.mark.parametrize("fraction,seed", [(0.05, 0), (0.3, 1), (1.0, 2)])
def test_induced_subgraph_holds_exactly_the_edges_among_its_nodes(store, fraction, seed):
    nodes, edge_index = induced_subgraph(store.indptr, store.indices, fraction, seed)
    assert len(nodes) == round(fraction * store.num_nodes) and (np.diff(nodes) > 0).all()
    a = sp.csr_matrix((np.ones(len(store.indices)), np.asarray(store.indices), np.asarray(store.indptr)))
    ref = sp.coo_matrix(a[nodes][:, nodes])
    assert set(zip(ref.row.tolist(), ref.col.tolist())) == set(map(tuple, edge_index.T.tolist()))
    assert edge_index.shape[1] == ref.nnz


def test_induced_subgraph_of_a_pool_is_seeded(store):
    pool = np.arange(0, store.num_nodes, 3)
    nodes, _ = induced_subgraph(store.indptr, store.indices, 0.1, 4, pool=pool)
    again, _ = induced_subgraph(store.indptr, store.indices, 0.1, 4, pool=pool)
    np.testing.assert_array_equal(nodes, again)
    assert (nodes % 3 == 0).all() and len(nodes) == round(0.1 * len(pool))


@pytest.mark.parametrize("ratio", [0.01, 0.4])
def test_ratio_split_sizes_and_stratification(ratio):
    rng = np.random.default_rng(0)
    labels = (rng.random(20000) < 0.03).astype(np.int8)
    labels[::50] = -1
    splits = ratio_split(labels, ratio, seed=2)
    labelled = np.flatnonzero(labels >= 0)
    together = np.concatenate(list(splits.values()))
    assert len(together) == len(np.unique(together)) == len(labelled)  # disjoint, cover the labelled nodes
    assert abs(len(splits["train"]) - ratio * len(labelled)) <= 1
    rest = len(labelled) - len(splits["train"])
    assert abs(len(splits["test"]) - 0.67 * rest) <= 1
    base = labels[labelled].mean()
    for split, ids in splits.items():
        assert abs(labels[ids].mean() - base) < 0.2 * base + 2 / len(ids), split
    assert ratio_split(labels, ratio, seed=2)["train"].tolist() == splits["train"].tolist()
    assert ratio_split(labels, ratio, seed=3)["train"].tolist() != splits["train"].tolist()


def test_mask_split_takes_a_column():
    masks = {s: np.zeros((10, 3), bool) for s in ("train", "val", "test")}
    masks["train"][[1, 2], 2] = True
    masks["test"][[5], 2] = True
    assert mask_split(masks, 2)["train"].tolist() == [1, 2] and mask_split(masks, 2)["test"].tolist() == [5]
    with pytest.raises(UserError, match="column 3"):
        mask_split(masks, 3)


@pytest.mark.parametrize("fanouts,max_nodes", [((16, 16), 64), ((1000,), 2000), ((40, 3), 200)])
def test_ego_edges_in_csr_row_order(store, fanouts, max_nodes):
    """The edges come by source, then by neighbour id (the order of a scan of the CSR rows), even
    though the sampler looks each pair up only once, in the row of its smaller-degree endpoint
    (merge or binary search): records stay byte-identical to the row scan's."""
    degree = np.diff(store.indptr)
    hubs = np.argsort(degree)[-5:]  # long rows take the binary-search branch
    targets = np.concatenate([np.random.default_rng(3).integers(0, store.num_nodes, 30), hubs])
    for sub in EgoSampler(store.indptr, store.indices, fanouts, max_nodes, seed=4).sample(targets):
        position = {int(v): i for i, v in enumerate(sub.nodes)}
        scan = [(i, position[int(v)]) for i, u in enumerate(sub.nodes.tolist())
                for v in store.indices[store.indptr[u] : store.indptr[u + 1]] if int(v) in position]
        assert list(map(tuple, sub.edge_index.T.tolist())) == scan
