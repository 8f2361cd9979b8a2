"""Fan-out neighbourhood batches (EdgeBatches for the sparse ET / MNA-GT): Floyd's sampling draws
k distinct neighbours uniformly (all when fewer); each target's tree holds exactly its sampled
neighbours, stored edges only, both directions once; only the targets are scored; 2 ranks × 2
workers score every eval node exactly once and train on disjoint targets; a resumed loader yields
what the uninterrupted one would; impossible settings are refused."""

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gtscale.graphs.fanout import build_fanout_loader
from gtscale.graphs.neighbourhoods import sample_neighbourhoods, sample_positions
from gtscale.graphs.splits import ratio_split
from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.loader.config import LoaderConfig

FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """2,000 nodes of power-law degree: many below the fan-outs, a few hubs far above."""
    path = tmp_path_factory.mktemp("fanout") / "store"
    build_store(synthetic_source(2000, 8000, seed=5, anomaly_ratio=0.1), path, progress=False)
    return path


@pytest.fixture(scope="module")
def graph(store):
    g = GraphStore.open(store)
    n = g.num_nodes
    adjacency = sp.csr_matrix((np.ones(len(g.indices)), np.asarray(g.indices), np.asarray(g.indptr)), shape=(n, n))
    return g, adjacency


@pytest.fixture(scope="module")
def splits(graph):
    return ratio_split(np.asarray(graph[0].labels), 0.4, 0)


def _config(**kw) -> LoaderConfig:
    return LoaderConfig(**({"num_workers": 0, "keys": ["target_y"], "seed": 5} | kw))


def test_floyd_draws_k_distinct_neighbours_uniformly_and_all_when_fewer():
    indptr = np.array([0, 5, 7, 7], np.int64)  # rows of degree 5, 2 and 0
    rows = np.array([0] * 20_000 + [1, 2])
    parent, position = sample_positions(indptr, rows, 2, np.random.default_rng(0))
    assert np.bincount(parent, minlength=len(rows)).tolist() == [2] * 20_001 + [0]
    assert sorted(position[parent == 20_000].tolist()) == [5, 6], "a row of no more than k neighbours gives all of them"
    pairs = np.sort(position[parent < 20_000].reshape(-1, 2), axis=1)
    assert (pairs[:, 0] < pairs[:, 1]).all() and (pairs >= 0).all() and (pairs < 5).all(), "distinct positions within the row"
    counts = Counter(map(tuple, pairs.tolist()))
    assert len(counts) == 10 and all(abs(c - 2000) < 200 for c in counts.values()), counts  # each 2-subset ≈ 1/10


def test_each_tree_holds_its_sampled_neighbourhood(graph):
    g, adjacency = graph
    targets = np.random.default_rng(1).choice(g.num_nodes, 300, replace=False)
    trees = sample_neighbourhoods(g.indptr, g.indices, targets, FANOUTS, np.random.default_rng(2))
    src, dst = trees.edge_index
    assert (np.diff(trees.tree) >= 0).all() and trees.nodes[trees.roots].tolist() == targets.tolist()
    assert (trees.tree[src] == trees.tree[dst]).all(), "edges stay within a tree"
    assert np.asarray(adjacency[trees.nodes[src], trees.nodes[dst]]).all(), "every edge is a stored edge"
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert len(pairs) == len(src) and all((b, a) in pairs for a, b in pairs), "both directions, each once"
    degree = np.diff(np.asarray(g.indptr))
    for t, target in enumerate(targets.tolist()):
        mine = np.flatnonzero(trees.tree == t)
        assert mine[0] == trees.roots[t] and len(np.unique(trees.nodes[mine])) == len(mine), "target first, no node twice"
        local = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(len(trees.nodes),) * 2)[mine][:, mine]
        hops = sp.csgraph.shortest_path(local, unweighted=True, indices=0)
        assert hops.max() <= len(FANOUTS) and len(mine) <= 1 + FANOUTS[0] + FANOUTS[0] * FANOUTS[1]
        first_hop = trees.nodes[mine[hops == 1]]
        assert len(first_hop) == min(degree[target], FANOUTS[0]), "the target's sampled neighbours, no more"
        if degree[target] <= FANOUTS[0]:
            assert sorted(first_hop.tolist()) == g.neighbours(target).tolist(), "all neighbours when fewer"
        for i in np.flatnonzero(hops == 1):  # hop-1 nodes sample at hop 2: all of a low-degree one's neighbours are in
            u = trees.nodes[mine[i]]
            linked = trees.nodes[mine[local[i].indices]]
            assert len(linked) >= min(degree[u], FANOUTS[1])
            if degree[u] <= FANOUTS[1]:
                assert sorted(linked.tolist()) == g.neighbours(u).tolist()


def test_a_batch_scores_only_its_targets(store, graph, splits):
    from gtscale.train.node_task import target_scores

    g, _ = graph
    loader = build_fanout_loader(store, splits["val"], FANOUTS, 64, _config(), train=False, rank=0, world_size=1)
    batch = next(iter(loader))
    targets = np.sort(splits["val"])[:64]
    assert batch.target_id.tolist() == targets.tolist() and batch.idx[:64].tolist() == targets.tolist()
    assert batch.graph_index[batch.target_rows].tolist() == list(range(64)) and batch.num_nodes > 64
    labels = np.asarray(g.labels[targets])
    np.testing.assert_array_equal(batch.target_y.numpy(), (labels == 1).astype(np.float32))
    np.testing.assert_array_equal(batch.node_feat_float.numpy()[batch.target_rows.numpy()], np.asarray(g.features[targets], np.float32))
    scores = torch.randn(64, 1)  # a model's node rows of an EdgeBatch with targets are the targets'
    ids, logits = target_scores(batch, scores)
    assert ids.tolist() == targets.tolist() and torch.equal(logits, scores[:, 0])
    with pytest.raises(ValueError, match="node rows for an EdgeBatch of 64 target nodes"):
        target_scores(batch, torch.randn(batch.num_nodes, 1))


def _unpadded(batch):
    """The batch without its padding: the nodes of the targets' own graphs."""
    from gtscale.loader.edge_batch import EdgeBatch

    own = batch.graph_index < len(batch.target_id)
    return EdgeBatch(edge_index=batch.edge_index, graph_index=batch.graph_index[own], num_graphs=len(batch.target_id),
                     node_feat_float=batch.node_feat_float[own], target_rows=batch.target_rows, target_id=batch.target_id,
                     target_y=batch.target_y, target_y_mask=batch.target_y_mask, idx=batch.idx[: len(batch.target_id)])


def test_padding_to_a_bucket_size_changes_no_targets_score(store, splits):
    """Node counts are padded to the loader's geometric bucket sizes (oneDNN caches a kernel per
    shape) with isolated, unscored nodes in filler graphs no larger than a neighbourhood."""
    from gtscale.graphs.fanout import padded_size
    from gtscale.loader.bucketing import geometric_boundaries
    from gtscale.models import build_model, load_model_config

    sizes = {hi - 1 for hi in geometric_boundaries(1.05, 1 << 20)}
    loader = build_fanout_loader(store, splits["val"], FANOUTS, 37, _config(), train=False, rank=0, world_size=1)
    et = build_model(load_model_config("et-tfinance") | {"node_width": 16, "head_dim": 8, "num_heads": 2, "num_memories": 16}).eval()
    mnagt = build_model(load_model_config("mnagt-small") | {"node_vocab": [], "node_float_dim": 10}).eval()
    padded_any = False
    for batch in loader:
        plain = _unpadded(batch)
        assert batch.num_nodes in sizes and batch.num_nodes == padded_size(plain.num_nodes) < 1.05 * plain.num_nodes + 2
        padded_any |= batch.num_nodes > plain.num_nodes
        assert int(batch.edge_index.max()) < plain.num_nodes, "no edge touches a padding node"
        assert (batch.idx[len(batch.target_id):] == -1).all() and batch.max_graph_nodes <= 1 + 4 + 4 * 3
        assert (batch.node_feat_float[plain.num_nodes:] == 0).all() and (torch.diff(batch.graph_index) >= 0).all()
        with torch.no_grad():
            for model in (et, mnagt):
                torch.testing.assert_close(model(batch).node, model(plain).node, atol=1e-5, rtol=1e-5)
    assert padded_any


def _rank_batches(store, targets, config, world_size, train, epochs=1, batch_targets=50):
    out = []
    for rank in range(world_size):
        loader = build_fanout_loader(store, targets, FANOUTS, batch_targets, config, train=train, rank=rank, world_size=world_size)
        out.append([b for _ in range(epochs) for b in loader])
    return out


def test_two_ranks_score_each_eval_node_exactly_once(store, splits):
    config = _config(num_workers=2, start_method="fork")
    per_rank = _rank_batches(store, splits["val"], config, world_size=2, train=False)
    ids = np.concatenate([b.target_id.numpy() for batches in per_rank for b in batches])
    assert sorted(ids.tolist()) == sorted(splits["val"].tolist())
    again = _rank_batches(store, splits["val"], config, world_size=2, train=False)
    assert all(torch.equal(a.edge_index, b.edge_index) for x, y in zip(per_rank, again) for a, b in zip(x, y)), "the same neighbourhoods every time"


def test_ranks_and_workers_train_on_disjoint_targets(store, splits):
    config = _config(num_workers=2, start_method="fork", epoch_batches=4)
    per_rank = _rank_batches(store, splits["train"], config, world_size=2, train=True, epochs=2, batch_targets=40)
    assert [len(b) for b in per_rank] == [8, 8]
    for epoch in range(2):
        seen = np.concatenate([per_rank[r][4 * epoch + i].target_id.numpy() for r in range(2) for i in range(4)])
        assert len(np.unique(seen)) == len(seen) == 8 * 40, "no target twice within an epoch's first pass"
        assert np.isin(seen, splits["train"]).all()
    assert not np.array_equal(per_rank[0][0].target_id.numpy(), per_rank[0][4].target_id.numpy()), "every epoch deals anew"


def _same(a, b) -> bool:
    return torch.equal(a.target_id, b.target_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.node_feat_float, b.node_feat_float)


@pytest.mark.parametrize("stop", [3, 7, 8])  # mid-epoch, right after an epoch's last batch, one into the next
def test_a_resumed_loader_yields_what_the_uninterrupted_one_would(store, splits, stop):
    config = _config(num_workers=2, epoch_batches=7, start_method="fork")

    def loader(batch_targets=30):
        return build_fanout_loader(store, splits["train"], FANOUTS, batch_targets, config, train=True, rank=1, world_size=2)

    whole = loader()
    stream = [b for _ in range(2) for b in whole]
    first = loader()
    taken, batches = [], iter(first)
    for _ in range(stop):
        try:
            taken.append(next(batches))
        except StopIteration:  # the epoch ended: the next iteration starts the next one
            batches = iter(first)
            taken.append(next(batches))
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    if resumed.epoch == 1:  # the resume was in epoch 0: epoch 1 follows
        rest += list(resumed)
    assert len(taken) + len(rest) == len(stream)
    assert all(_same(a, b) for a, b in zip(taken + rest, stream))
    with pytest.raises(Exception, match="fingerprint|shards|exact resume"):
        loader(batch_targets=31).load_state_dict(state)


def test_impossible_settings_are_refused(store, splits):
    from gtscale.errors import UserError

    with pytest.raises(UserError, match="data.graph.fanouts"):
        build_fanout_loader(store, splits["train"], [4, 0], 10, _config(), train=True, rank=0, world_size=1)
    with pytest.raises(UserError, match="'spd'"):
        build_fanout_loader(store, splits["train"], FANOUTS, 10, _config(keys=["spd", "target_y"]), train=True, rank=0, world_size=1)
    with pytest.raises(UserError, match="target node ids"):
        build_fanout_loader(store, np.array([0, 10_000]), FANOUTS, 10, _config(), train=False, rank=0, world_size=1)


@pytest.mark.parametrize("model_name", ["et", "mnagt"])
def test_the_edge_list_models_run_on_batches_and_the_filler(store, splits, model_name):
    from gtscale.models import build_model, load_model_config

    if model_name == "et":
        cfg = load_model_config("et-tfinance") | {"node_width": 16, "head_dim": 8, "num_heads": 2, "num_memories": 16}
    else:
        cfg = load_model_config("mnagt-small") | {"node_vocab": [], "node_float_dim": 10}
    model = build_model(cfg)
    loader = build_fanout_loader(store, splits["val"], FANOUTS, 32, _config(), train=False, rank=0, world_size=1)
    for batch in [next(iter(loader)), loader.filler_batch()]:
        out = model(batch)
        assert out.node.shape[0] == len(batch.target_rows) and torch.isfinite(out.node).all()  # the targets' rows
