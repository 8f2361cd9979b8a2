"""Graphormer's shortest-path choice: the Floyd–Warshall intermediate-node matrix (`fw_mid`).

Where several shortest paths join i and j, a BFS predecessor matrix (`pred`, structure.py) and
Graphormer's Floyd–Warshall pick different ones, and Graphormer's multi-hop edge encoding then
sees different bond features (the authors' graphormer/data/algos.pyx, microsoft/Graphormer). To
let a model see the authors' paths, `gtscale shard --paths floyd-warshall` stores the matrix their
path reconstruction reads, and the loader (loader/path_edges.py) rebuilds each path from it.

The rule, as algos.pyx applies it to the 0/1 adjacency of the directed edges: distances start at
0 on the diagonal, 1 on edges, "infinite" elsewhere; for k, then i, then j (all ascending), a
strictly shorter i→k→j replaces the i→j distance and records mid[i, j] = k. So mid[i, j] is the k
of the *last strict improvement*, and the path is rebuilt recursively as

    path(i, j) = path(i, k) + [k] + path(k, j)     with k = mid[i, j]; [] where there is no k

(their get_all_edges), the edges of [i] + path(i, j) + [j] taken in order (their gen_edge_input).
Pairs joined by an edge (and i == i) keep no k. The only departure: the authors' "infinite" is
the number 510, so on graphs with shortest paths of 510 hops or more their distances saturate;
here it is a true infinity, which on every graph with shorter paths gives the same matrix.

Stored like `pred`: dtype schema.pred_dtype(N), the dtype's max (schema.pred_sentinel) where
there is no intermediate node: the diagonal, pairs joined by an edge, unreachable pairs (spd
tells them apart). Compiled by numba: O(N³) per graph, ~0.1 ms for a 30-atom molecule.
"""

from __future__ import annotations

import numba
import numpy as np

from gtscale.format import schema


@numba.njit(cache=True, nogil=True)
def _floyd_warshall_mid(src, dst, n, mid, no_mid):
    """Fill mid [n, n] in place with the k of the last strict improvement (no_mid where none)."""
    infinite = np.int64(1) << 40  # above any sum of two real distances, below overflow when added
    dist = np.full((n, n), infinite, np.int64)
    for t in range(src.shape[0]):
        dist[src[t], dst[t]] = 1
    for i in range(n):
        dist[i, i] = 0
    mid[:, :] = no_mid
    for k in range(n):
        for i in range(n):
            through_k = dist[i, k]
            if through_k >= infinite:
                continue  # i cannot reach k: no i→k→j can improve anything
            for j in range(n):
                cost = through_k + dist[k, j]
                if dist[i, j] > cost:
                    dist[i, j] = cost
                    mid[i, j] = k


def floyd_warshall_mid(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """fw_mid [N, N] (dtype schema.pred_dtype(N)) of the directed edges edge_index [2, E]."""
    dtype = schema.pred_dtype(num_nodes)
    mid = np.empty((num_nodes, num_nodes), dtype=dtype)
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    _floyd_warshall_mid(edge_index[0], edge_index[1], num_nodes, mid, dtype.type(schema.pred_sentinel(dtype)))
    return mid
