"""Structural matrices against independent references (scipy, linear algebra identities)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from gtscale.format import schema
from gtscale.prep.structure import StructureOptions, normalized_laplacian, structure, structure_many


@st.composite
def graphs(draw, max_nodes=30, directed=False):
    n = draw(st.integers(1, max_nodes))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = {(i, j) for i, j in pairs if i != j}
    if not directed:
        edges |= {(j, i) for i, j in edges}
    edge_index = np.array(sorted(edges), dtype=np.int64).reshape(-1, 2).T
    return edge_index.astype(np.int16), n


def scipy_hops(edge_index, n):
    a = csr_matrix((np.ones(edge_index.shape[1]), (edge_index[0], edge_index[1])), shape=(n, n))
    return shortest_path(a, directed=True, unweighted=True)


def check_paths(edge_index, n, spd, pred):
    """Walking pred back from j must reach i in exactly spd[i, j] steps along existing edges."""
    edges = set(map(tuple, edge_index.T.tolist()))
    sentinel = schema.pred_sentinel(pred.dtype)
    for i in range(n):
        for j in range(n):
            if i == j or spd[i, j] == schema.SPD_UNREACHABLE:
                assert pred[i, j] == sentinel
                continue
            node, steps = j, 0
            while node != i:
                before = int(pred[i, node])
                assert (before, node) in edges, f"{before}->{node} is not an edge"
                node, steps = before, steps + 1
                assert steps <= spd[i, j]
            assert steps == spd[i, j]


@settings(max_examples=60, deadline=None)
@given(st.lists(graphs(), min_size=1, max_size=6))
def test_shortest_paths_equal_scipy_and_paths_rebuild(batch):
    results = structure_many(batch, StructureOptions(svd_rank=0, lap_k=0))
    for (edge_index, n), out in zip(batch, results):
        reference = scipy_hops(edge_index, n)
        expected = np.where(np.isinf(reference), schema.SPD_UNREACHABLE, reference).astype(np.uint8)
        assert out[schema.SPD].dtype == np.uint8
        assert np.array_equal(out[schema.SPD], expected)
        check_paths(edge_index, n, out[schema.SPD], out[schema.PRED])


@settings(max_examples=25, deadline=None)
@given(graphs(max_nodes=20, directed=True))
def test_directed_graphs(graph):
    edge_index, n = graph
    out = structure(edge_index, n)
    reference = scipy_hops(edge_index, n)
    assert np.array_equal(out[schema.SPD], np.where(np.isinf(reference), 255, reference).astype(np.uint8))
    check_paths(edge_index, n, out[schema.SPD], out[schema.PRED])
    assert np.array_equal(out[schema.OUT_DEGREE], np.bincount(edge_index[0], minlength=n))
    assert np.array_equal(out[schema.IN_DEGREE], np.bincount(edge_index[1], minlength=n))


def test_large_graph_gets_uint16_predecessors():
    n = 300
    ring = np.array([np.arange(n), (np.arange(n) + 1) % n])
    edge_index = np.concatenate([ring, ring[::-1]], axis=1)
    out = structure(edge_index, n, StructureOptions(svd_rank=0, lap_k=0))
    assert out[schema.PRED].dtype == np.uint16
    assert out[schema.SPD][0, n // 2] == n // 2 and out[schema.SPD][0, n - 1] == 1
    assert out[schema.SPD][0, 140] == 140
    check_paths(edge_index, n, out[schema.SPD], out[schema.PRED])


@settings(max_examples=40, deadline=None)
@given(graphs(max_nodes=12), st.booleans())
def test_full_rank_svd_encoding_reconstructs_a_plus_i(graph, directed):
    edge_index, n = graph
    if directed and edge_index.shape[1]:
        edge_index = edge_index[:, ::2]  # drop one direction of some edges: a non-symmetric A
    out = structure(edge_index, n, StructureOptions(spd=False, degree=False, svd_rank=n, lap_k=0))
    svd = out[schema.SVD_PE].astype(np.float64)
    assert svd.shape == (n, 2 * n) and out[schema.SVD_PE].dtype == np.float16
    a = np.zeros((n, n))
    a[edge_index[0], edge_index[1]] = 1
    reconstructed = svd[:, :n] @ svd[:, n:].T
    assert np.allclose(reconstructed, a + np.eye(n), atol=2e-2)


def test_svd_keeps_the_largest_singular_values_first():
    n = 10
    path = np.array([np.arange(n - 1), np.arange(1, n)])
    edge_index = np.concatenate([path, path[::-1]], axis=1)
    out = structure(edge_index, n, StructureOptions(spd=False, degree=False, svd_rank=3, lap_k=0))
    u = out[schema.SVD_PE][:, :3].astype(np.float64)
    sigma = np.linalg.svd(np.eye(n) + np.eye(n, k=1) + np.eye(n, k=-1), compute_uv=False)[:3]
    assert np.allclose((u**2).sum(axis=0), sigma, atol=1e-2)  # column norms² of U√Σ are σ


@settings(max_examples=40, deadline=None)
@given(graphs(max_nodes=15), st.integers(1, 10))
def test_laplacian_eigenpairs(graph, k):
    edge_index, n = graph
    out = structure(edge_index, n, StructureOptions(spd=False, degree=False, svd_rank=0, lap_k=k))
    vecs, vals = out[schema.LAP_PE].astype(np.float64), out[schema.LAP_EIGVAL].astype(np.float64)
    assert vecs.shape == (n, k) and vals.shape == (k,)
    a = np.zeros((1, n, n))
    a[0, edge_index[0], edge_index[1]] = 1
    lap = normalized_laplacian(a)[0]
    keep = min(n, k)
    assert np.allclose(lap @ vecs[:, :keep], vecs[:, :keep] * vals[:keep], atol=2e-2)
    assert np.all(np.diff(vals[:keep]) >= -1e-2)  # ascending
    assert np.all(vecs[:, keep:] == 0) and np.all(vals[keep:] == 0)  # padding when n < k


@pytest.mark.parametrize("n", [1, 2, 5])
def test_graphs_smaller_than_r_and_k(n):
    path = np.array([np.arange(n - 1), np.arange(1, n)], dtype=np.int64)
    edge_index = np.concatenate([path, path[::-1]], axis=1)
    out = structure(edge_index, n, StructureOptions(svd_rank=8, lap_k=8))
    assert out[schema.SVD_PE].shape == (n, 16) and out[schema.LAP_PE].shape == (n, 8)
    assert np.isfinite(out[schema.SVD_PE].astype(np.float32)).all()
    assert np.all(out[schema.SVD_PE][:, n:8] == 0) and np.all(out[schema.SVD_PE][:, 8 + n :] == 0)
    if n == 1:
        assert out[schema.SPD].tolist() == [[0]] and out[schema.IN_DEGREE].tolist() == [0]


def test_disconnected_molecule():
    from gtscale.prep.featurize import featurize_smiles

    graph = featurize_smiles("CC(=O)[O-].[Na+]")
    out = structure(graph[schema.EDGE_INDEX], len(graph[schema.NODE_FEAT]))
    na = len(graph[schema.NODE_FEAT]) - 1
    assert (out[schema.SPD][na, :na] == schema.SPD_UNREACHABLE).all()
    assert out[schema.SPD][na, na] == 0
    assert (out[schema.PRED][na, :na] == schema.pred_sentinel(np.uint8)).all()


def test_options_switch_keys_off():
    edge_index = np.array([[0, 1], [1, 0]])
    out = structure(edge_index, 2, StructureOptions(spd=False, degree=False, svd_rank=0, lap_k=0))
    assert out == {}


def test_degrees_above_255_take_uint16():
    n = 300
    star = np.array([np.zeros(n - 1, dtype=np.int64), np.arange(1, n)])
    edge_index = np.concatenate([star, star[::-1]], axis=1)
    small = np.array([[0, 1], [1, 0]])
    hub, pair = structure_many([(edge_index, n), (small, 2)], StructureOptions(spd=False, svd_rank=0, lap_k=0))
    assert hub[schema.IN_DEGREE].dtype == np.uint16 and hub[schema.IN_DEGREE][0] == n - 1
    assert pair[schema.IN_DEGREE].dtype == np.uint8 and pair[schema.OUT_DEGREE].tolist() == [1, 1]


def test_a_molecules_encodings_do_not_depend_on_the_molecules_computed_with_it():
    """The same molecule, alone or stacked with others of its size, gets bit-identical SVD and
    Laplacian encodings (a stacked eigh changed the basis of repeated eigenvalues: the shard a
    molecule lands in, or a predict batch, changed its encodings)."""
    from gtscale.prep.featurize import featurize_smiles
    from gtscale.prep.sources.bundled import read_nci_tpsa

    graphs = [featurize_smiles(s) for s in read_nci_tpsa().smiles[:300]]
    pairs = [(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for g in graphs]
    together = structure_many(pairs, StructureOptions())
    differ = 0
    for pair, stacked in zip(pairs, together):
        alone = structure_many([pair], StructureOptions())[0]
        differ += any(not np.array_equal(alone[k], stacked[k]) for k in (schema.SVD_PE, schema.LAP_PE, schema.LAP_EIGVAL))
    assert differ == 0


def test_encodings_do_not_depend_on_the_callers_thread_count():
    """The sharder's workers run one thread, `gtscale predict` torch's default: on the old code 5 of
    the 58 bundled molecules with ≥ 40 atoms got other SVD / Laplacian bytes on 4 threads."""
    import torch

    from gtscale.bench.shard import bundled_smiles
    from gtscale.prep.featurize import FeaturizeError, featurize_smiles

    graphs = []
    for smiles in bundled_smiles(6000):
        try:
            graph = featurize_smiles(smiles)
        except FeaturizeError:
            continue
        if len(graph[schema.NODE_FEAT]) >= 40:
            graphs.append((graph[schema.EDGE_INDEX], len(graph[schema.NODE_FEAT])))
    assert len(graphs) >= 20
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = structure_many(graphs, StructureOptions())
        torch.set_num_threads(4)
        threaded = structure_many(graphs, StructureOptions())
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(serial, threaded):
        for key in (schema.SVD_PE, schema.LAP_PE, schema.LAP_EIGVAL):
            assert a[key].tobytes() == b[key].tobytes(), key
