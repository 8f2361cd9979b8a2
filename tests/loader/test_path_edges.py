"""Path edges rebuilt from pred are real shortest paths: checked edge by edge against networkx."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtscale.format import schema
from gtscale.loader.path_edges import PathError, edge_id_table, graph_path_edges, path_edge_ids
from gtscale.prep.structure import shortest_paths


def _check_paths(n: int, edge_index: np.ndarray, edge_feat: np.ndarray, max_dist: int) -> None:
    """Every (i, j): the rebuilt edge sequence is a shortest i→j path's first D edges (networkx BFS)."""
    spd, pred = shortest_paths(edge_index, n)
    out = graph_path_edges(edge_index, edge_feat, spd, pred, max_dist)
    ids = path_edge_ids(
        spd[None].astype(np.int64),
        np.where(pred == schema.pred_sentinel(pred.dtype), -1, pred.astype(np.int64))[None],
        edge_id_table(edge_index.astype(np.int64), np.zeros(edge_index.shape[1], dtype=np.int64), 1, n),
        max_dist,
    )[0]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(zip(edge_index[0].tolist(), edge_index[1].tolist()))
    hops = dict(nx.all_pairs_shortest_path_length(graph))
    assert out.shape == (n, n, max_dist, edge_feat.shape[1])
    for i in range(n):
        for j in range(n):
            d = hops[i].get(j)
            if d is None or i == j:
                assert (ids[i, j] == -1).all() and (out[i, j] == schema.FEATURE_PAD).all()
                assert spd[i, j] == (0 if i == j else schema.SPD_UNREACHABLE)
                continue
            assert spd[i, j] == d
            used = ids[i, j][ids[i, j] >= 0]
            assert len(used) == min(d, max_dist)
            assert (ids[i, j][len(used) :] == -1).all()
            assert (out[i, j][len(used) :] == schema.FEATURE_PAD).all()
            walk = [i]
            for position, e in enumerate(used):
                u, v = edge_index[:, e]
                assert u == walk[-1], "consecutive path edges must share a node"
                walk.append(int(v))
                assert hops[i][int(v)] == position + 1, "each step must move one hop further from i"
                np.testing.assert_array_equal(out[i, j, position], edge_feat[e].astype(np.int64) + schema.FEATURE_SHIFT)
            if d <= max_dist:
                assert walk[-1] == j
            else:
                assert hops[walk[-1]][j] == d - max_dist, "the prefix must lie on a shortest path to j"


@pytest.mark.parametrize("max_dist", [1, 3, 5, 30])
def test_path_edges_of_nci_molecules_are_shortest_paths(nci_by_idx, max_dist):
    for record in list(nci_by_idx.values())[:12]:
        _check_paths(len(record[schema.NODE_FEAT]), record[schema.EDGE_INDEX].astype(np.int64), record[schema.EDGE_FEAT], max_dist)


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 14))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs = [(u, v) for u, v in dict.fromkeys(pairs) if u != v]
    directed = draw(st.booleans())
    if not directed:
        pairs = list(dict.fromkeys(pairs + [(v, u) for u, v in pairs]))
    edge_index = np.array(pairs, dtype=np.int64).T.reshape(2, -1)
    attr = np.array(draw(st.lists(st.integers(0, 4), min_size=edge_index.shape[1] * 2, max_size=edge_index.shape[1] * 2)), dtype=np.uint8)
    return n, edge_index, attr.reshape(-1, 2)


@settings(max_examples=60, deadline=None)
@given(random_graphs(), st.integers(1, 6))
def test_path_edges_of_random_directed_and_disconnected_graphs(graph, max_dist):
    n, edge_index, edge_feat = graph
    spd, pred = shortest_paths(edge_index, n)
    out = graph_path_edges(edge_index, edge_feat, spd, pred, max_dist)
    assert out.shape == (n, n, max_dist, 2)
    _check_paths(n, edge_index, edge_feat, max_dist)


def test_long_paths_stored_at_spd_max_still_get_their_first_edges():
    n = schema.SPD_MAX + 6  # a path graph whose far pairs are capped at SPD_MAX hops
    src = np.arange(n - 1)
    edge_index = np.stack([np.concatenate([src, src + 1]), np.concatenate([src + 1, src])])
    edge_feat = (np.arange(edge_index.shape[1]) % 5).astype(np.uint8)[:, None]
    spd, pred = shortest_paths(edge_index, n)
    assert (spd == schema.SPD_MAX).sum() > 0
    out = graph_path_edges(edge_index, edge_feat, spd, pred, 3)
    far = n - 1  # 0 → far is n - 1 hops: its first three edges are 0→1, 1→2, 2→3
    np.testing.assert_array_equal(out[0, far, :, 0], edge_feat[:3, 0].astype(np.int64) + schema.FEATURE_SHIFT)


def test_a_predecessor_without_an_edge_is_an_error_naming_the_pair():
    edge_index = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
    spd, pred = shortest_paths(edge_index, 3)
    pred = pred.copy()
    pred[0, 2] = 0  # claims 0 → 2 directly, but there is no such edge
    with pytest.raises(PathError, match=r"\(0, 2\)"):
        graph_path_edges(edge_index, np.zeros((4, 1), np.uint8), spd, pred, 3)
