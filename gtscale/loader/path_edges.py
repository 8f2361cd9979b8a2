"""Graphormer's multi-hop edge encoding, rebuilt at load time from the predecessor matrix.

For a pair (i, j) at d = spd[i, j] hops, the shortest path v0 = i → v1 → … → vd = j is the one
encoded by `pred` (pred[i, j] is the node before j, so the path to j is the path to pred[i, j]
plus one edge). Position p < D of the output holds the edge v_p → v_{p+1}; positions past the end
of the path, pairs i == i and unreachable pairs hold nothing (-1 as an edge id, FEATURE_PAD as a
feature). D is Graphormer's `multi_hop_max_dist`.

Work is organised by hop count instead of walking each path: all pairs at distance d copy the
first D edge ids of their parent pair (i, pred[i, j]), which sits at distance d − 1 and is
therefore already done, then append their own last edge. That is one vectorised gather per
distance for a whole batch, O(pairs · D) in total.

Shortest paths longer than SPD_MAX hops are stored as SPD_MAX (schema.py), so pairs at SPD_MAX
may have parents at SPD_MAX too; they are resolved in rounds, parent first.

Shards made with `--paths floyd-warshall` also carry `fw_mid`, Graphormer's Floyd–Warshall
intermediate node k of each pair (prep/floyd_warshall.py); `path_edge_ids_fw` rebuilds the
authors' path from it instead, path(i, j) = path(i, k) ‖ path(k, j), also one vectorised gather per
round: a pair is done once both halves are, and both halves are strictly shorter.
"""

from __future__ import annotations

import numpy as np

from gtscale.format import schema


class PathError(ValueError):
    """`pred` and `spd` of graph `graph` (its position in the batch) do not describe shortest paths."""

    def __init__(self, graph: int, message: str):
        super().__init__(message)
        self.graph = graph


def edge_id_table(edge_index: np.ndarray, graph_of_edge: np.ndarray, batch_size: int, max_graph_nodes: int) -> np.ndarray:
    """Flat [B·N·N] int64 table: row of edge u→v in the concatenated edge list, -1 where none.

    With parallel edges the last one listed wins (the same one the dense edge_feat shows)."""
    table = np.full(batch_size * max_graph_nodes * max_graph_nodes, -1, dtype=np.int64)
    flat = (graph_of_edge * max_graph_nodes + edge_index[0]) * max_graph_nodes + edge_index[1]
    table[flat] = np.arange(edge_index.shape[1], dtype=np.int64)
    return table



def _reachable_pairs(spd: np.ndarray, max_dist: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The output rows [B·N·N, D] (all -1), the flat hop counts, and the flat indices of the pairs
    with a path of at least one edge (the only ones with path edges)."""
    b, n, _ = spd.shape
    hops = spd.reshape(-1)
    return np.full((b * n * n, max_dist), -1, dtype=np.int64), hops, np.flatnonzero((hops >= 1) & (hops != schema.SPD_UNREACHABLE))

def path_edge_ids(spd: np.ndarray, pred: np.ndarray, edge_ids: np.ndarray, max_dist: int) -> np.ndarray:
    """[B, N, N, D] int64 edge rows along each shortest path, -1 past its end.

    spd: [B, N, N] hops (SPD_UNREACHABLE where there is no path, also on padding).
    pred: [B, N, N] int64 predecessor node, -1 where there is none.
    edge_ids: flat [B·N·N] table from `edge_id_table`."""
    b, n, _ = spd.shape
    out, hops, pairs = _reachable_pairs(spd, max_dist)
    if pairs.size == 0 or max_dist == 0:
        return out.reshape(b, n, n, max_dist)
    pairs = pairs[np.argsort(hops[pairs], kind="stable")]
    hops_sorted = hops[pairs]
    before = pred.reshape(-1)[pairs]
    if (before < 0).any():
        bad = int(pairs[before < 0][0])
        raise PathError(bad // (n * n), f"pair {divmod(bad % (n * n), n)} is reachable but has no predecessor")
    row_start = pairs - pairs % n  # flat index of (b, i, 0)
    parent = row_start + before  # flat index of (b, i, pred[i, j])
    graph_start = pairs - pairs % (n * n)
    last_edge = edge_ids[graph_start + before * n + pairs % n]  # edge pred[i, j] → j
    if (last_edge < 0).any():
        bad = int(pairs[last_edge < 0][0])
        raise PathError(bad // (n * n), f"pair (i, j) = {divmod(bad % (n * n), n)}: pred[i, j] has no edge to j")
    parent_hops = hops[parent]
    broken = (parent_hops != hops_sorted - 1) & ((hops_sorted != schema.SPD_MAX) | (parent_hops < schema.SPD_MAX - 1))
    if broken.any():
        bad = int(pairs[broken][0])
        raise PathError(bad // (n * n), f"pair (i, j) = {divmod(bad % (n * n), n)}: spd[i, pred[i, j]] is not spd[i, j] - 1")
    bounds = np.searchsorted(hops_sorted, np.arange(1, schema.SPD_MAX + 2))
    for d in range(1, min(int(hops_sorted[-1]), schema.SPD_MAX - 1) + 1):
        lo, hi = bounds[d - 1], bounds[d]
        if lo == hi:
            continue
        _extend(out, pairs[lo:hi], parent[lo:hi], last_edge[lo:hi], d, max_dist)
    capped = bounds[schema.SPD_MAX - 1]
    _resolve_capped(out, pairs[capped:], parent[capped:], max_dist, n * n)
    return out.reshape(b, n, n, max_dist)


def _extend(out: np.ndarray, pairs: np.ndarray, parent: np.ndarray, last_edge: np.ndarray, d: int, max_dist: int) -> None:
    """Pairs at distance d: their parent's first D edges, then their own last edge at d − 1."""
    keep = min(d - 1, max_dist)
    if keep:
        out[pairs, :keep] = out[parent, :keep]
    if d - 1 < max_dist:
        out[pairs, d - 1] = last_edge


def _resolve_capped(out: np.ndarray, pairs: np.ndarray, parent: np.ndarray, max_dist: int, pairs_per_graph: int) -> None:
    """Pairs stored at SPD_MAX (true distance ≥ SPD_MAX): their last edge lies beyond any D a
    model uses, so only the prefix is copied — in rounds, each pair after its parent."""
    if pairs.size == 0:
        return
    if max_dist >= schema.SPD_MAX:
        raise PathError(int(pairs[0]) // pairs_per_graph, f"path edges need max_dist < {schema.SPD_MAX} when paths reach {schema.SPD_MAX} hops")
    pending = np.ones(pairs.size, dtype=bool)
    capped = np.zeros(out.shape[0], dtype=bool)
    capped[pairs] = True
    while pending.any():
        ready = pending & ~capped[parent]
        if not ready.any():
            raise PathError(int(pairs[pending][0]) // pairs_per_graph, "pred has a cycle among pairs stored at SPD_MAX hops")
        out[pairs[ready]] = out[parent[ready]]
        capped[pairs[ready]] = False
        pending &= ~ready


def path_edge_ids_fw(spd: np.ndarray, mid: np.ndarray, edge_ids: np.ndarray, max_dist: int) -> np.ndarray:
    """[B, N, N, D] int64 edge rows along Graphormer's Floyd–Warshall path of each pair, -1 past its end.

    spd: [B, N, N] hops as for `path_edge_ids`. mid: [B, N, N] int64 intermediate node, -1 where
    there is none (pairs joined by an edge). edge_ids: flat [B·N·N] table from `edge_id_table`."""
    b, n, _ = spd.shape
    out, hops, pairs = _reachable_pairs(spd, max_dist)
    if pairs.size == 0 or max_dist == 0:
        return out.reshape(b, n, n, max_dist)
    via = mid.reshape(-1)[pairs]
    if (via >= n).any():
        bad = int(pairs[via >= n][0])
        raise PathError(bad // (n * n), f"pair (i, j) = {divmod(bad % (n * n), n)}: fw_mid holds a node id outside the graph")
    direct = via < 0
    _check_direct(pairs[direct], hops, edge_ids, n)
    out[pairs[direct], 0] = edge_ids[pairs[direct]]
    pairs, via = pairs[~direct], via[~direct]
    left = pairs - pairs % n + via  # flat index of (b, i, k)
    right = pairs - pairs % (n * n) + via * n + pairs % n  # flat index of (b, k, j)
    _check_halves(pairs, left, right, hops, n)
    done = np.zeros(out.shape[0], dtype=bool)
    done[pairs] = True
    done = ~done  # every pair outside `pairs` (direct, i == i, unreachable, padding) is final
    columns = np.arange(max_dist)
    while pairs.size:
        ready = done[left] & done[right]
        if not ready.any():
            raise PathError(int(pairs[0]) // (n * n), "fw_mid has a cycle among pairs stored at SPD_MAX hops")
        p, first, last = pairs[ready], left[ready], right[ready]
        split = np.minimum(hops[first], max_dist)[:, None]  # the first half fills positions < split
        second = np.take_along_axis(out[last], np.clip(columns - split, 0, max_dist - 1), axis=1)
        out[p] = np.where(columns < split, out[first], second)
        done[p] = True
        pairs, left, right = pairs[~ready], left[~ready], right[~ready]
    return out.reshape(b, n, n, max_dist)


def _check_direct(pairs: np.ndarray, hops: np.ndarray, edge_ids: np.ndarray, n: int) -> None:
    """Pairs without an intermediate node must be one edge apart."""
    bad = pairs[(hops[pairs] != 1) | (edge_ids[pairs] < 0)]
    if bad.size:
        raise PathError(int(bad[0]) // (n * n), f"pair (i, j) = {divmod(int(bad[0]) % (n * n), n)} has no fw_mid but is not an edge")


def _check_halves(pairs: np.ndarray, left: np.ndarray, right: np.ndarray, hops: np.ndarray, n: int) -> None:
    """i → k and k → j must be reachable and add up to i → j (below SPD_MAX, where hops are exact)."""
    hl, hr, h = hops[left], hops[right], hops[pairs]
    reachable = (hl >= 1) & (hl != schema.SPD_UNREACHABLE) & (hr >= 1) & (hr != schema.SPD_UNREACHABLE)
    exact = h < schema.SPD_MAX
    adds_up = np.where(exact, hl + hr == h, (hl + hr >= h) & (hl <= h) & (hr <= h))
    bad = pairs[~(reachable & adds_up)]
    if bad.size:
        raise PathError(int(bad[0]) // (n * n), f"pair (i, j) = {divmod(int(bad[0]) % (n * n), n)}: fw_mid is not on a shortest i→j path")


def path_edges(edge_feat_shifted: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[B, N, N, D, Fe] features (already shifted by FEATURE_SHIFT) of the edges in `ids`; FEATURE_PAD where -1."""
    table = np.empty((edge_feat_shifted.shape[0] + 1, edge_feat_shifted.shape[1]), dtype=edge_feat_shifted.dtype)
    table[0] = schema.FEATURE_PAD  # row 0 answers id -1: one gather, no mask
    table[1:] = edge_feat_shifted
    return table[ids + 1]


def graph_path_edges(
    edge_index: np.ndarray, edge_feat: np.ndarray, spd: np.ndarray, pred: np.ndarray, max_dist: int, fw_mid: np.ndarray | None = None
) -> np.ndarray:
    """[N, N, D, Fe] int64 path-edge features of one record (the batched code on a batch of one),
    along fw_mid's paths when it is given, else pred's."""
    n = spd.shape[0]
    edge_index = edge_index.astype(np.int64)
    table = edge_id_table(edge_index, np.zeros(edge_index.shape[1], dtype=np.int64), 1, n)
    if fw_mid is not None:
        ids = path_edge_ids_fw(spd[None].astype(np.int64), sentinel_to_minus_one(fw_mid)[None], table, max_dist)
    else:
        ids = path_edge_ids(spd[None].astype(np.int64), sentinel_to_minus_one(pred)[None], table, max_dist)
    return path_edges(edge_feat.astype(np.int64) + schema.FEATURE_SHIFT, ids)[0]


def sentinel_to_minus_one(nodes: np.ndarray) -> np.ndarray:
    """pred / fw_mid as int64 with -1 where the stored value is the dtype's "none" sentinel."""
    out = nodes.astype(np.int64)
    out[nodes == schema.pred_sentinel(nodes.dtype)] = -1
    return out
