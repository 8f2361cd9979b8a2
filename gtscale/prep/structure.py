"""Structural matrices of a graph, precomputed once by the sharder (see schema.py for the keys).

- shortest-path hops (`spd`) and a predecessor matrix (`pred`) from which the loader rebuilds
  every shortest path's edges (Graphormer's multi-hop edge encoding); with paths
  "floyd-warshall" also Graphormer's own choice among tied shortest paths (`fw_mid`,
  floyd_warshall.py);
- in/out degrees;
- EGT's SVD encoding of A+I: the top r singular triplets as U√Σ ‖ V√Σ, so that with full rank
  (U√Σ)(V√Σ)ᵀ = A+I;
- eigenpairs of the symmetric normalised Laplacian I − D^-½ A D^-½ (smallest first, the trivial
  one included), for the Energy Transformer and GT-style models.

`structure_many` computes these for a list of graphs at once: graphs of equal size share one
stacked LAPACK call, which is what makes per-molecule linear algebra cheap; shortest paths come
from a BFS compiled with numba, per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import torch

from gtscale.format import schema
from gtscale.prep import floyd_warshall


@dataclass(frozen=True)
class StructureOptions:
    spd: bool = True  # shortest-path hops + predecessor matrix
    degree: bool = True  # in/out degrees
    svd_rank: int = 8  # r of EGT's SVD encoding; 0 switches it off
    lap_k: int = 8  # number of Laplacian eigenpairs; 0 switches them off
    paths: str = "bfs"  # which shortest path path edges follow: "bfs" (pred) or "floyd-warshall" (+ fw_mid, Graphormer's)

    def __post_init__(self):
        if self.svd_rank < 0 or self.lap_k < 0:
            raise ValueError("svd_rank and lap_k must be >= 0")
        if self.paths not in floyd_warshall.PATH_RULES:
            raise ValueError(f"paths must be one of {floyd_warshall.PATH_RULES}, got {self.paths!r}")
        if self.paths != "bfs" and not self.spd:
            raise ValueError(f"paths {self.paths!r} needs shortest paths (spd)")


@numba.njit(cache=True, nogil=True)
def _bfs_all_sources(src, dst, n, spd, pred, no_pred):
    """BFS from every node along directed edges src[t]→dst[t], filling spd and pred in place.

    pred[s, v] is the node from which BFS first reached v: the node before v on a shortest s→v
    path. Compiled by numba: one molecule takes a few microseconds, where numpy needs dozens of
    array operations per BFS hop."""
    out_start = np.zeros(n + 1, np.int64)  # CSR of out-neighbours
    for t in range(src.shape[0]):
        out_start[src[t] + 1] += 1
    for u in range(n):
        out_start[u + 1] += out_start[u]
    out_nbr = np.empty(src.shape[0], np.int64)
    fill = out_start[:-1].copy()
    for t in range(src.shape[0]):
        out_nbr[fill[src[t]]] = dst[t]
        fill[src[t]] += 1
    queue = np.empty(n, np.int64)
    for s in range(n):
        spd[s, :] = SPD_UNREACHABLE
        pred[s, :] = no_pred
        spd[s, s] = 0
        head, tail = 0, 1
        queue[0] = s
        while head < tail:
            u = queue[head]
            head += 1
            hops = min(spd[s, u] + 1, SPD_MAX)
            for t in range(out_start[u], out_start[u + 1]):
                v = out_nbr[t]
                if spd[s, v] == SPD_UNREACHABLE and v != s:
                    spd[s, v] = hops
                    pred[s, v] = u
                    queue[tail] = v
                    tail += 1


SPD_UNREACHABLE = schema.SPD_UNREACHABLE  # module constants: numba compiles them in
SPD_MAX = schema.SPD_MAX
_UINT8_MAX = 255


def shortest_paths(edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(spd uint8 [N,N], pred [N,N]) along directed edges, unweighted (BFS from every node).

    spd holds SPD_UNREACHABLE where no path exists and caps longer paths at SPD_MAX.
    pred[i, j] is the node before j on one shortest i→j path; the dtype's max where there is none
    (i == j, or unreachable)."""
    dtype = schema.pred_dtype(num_nodes)
    spd = np.empty((num_nodes, num_nodes), dtype=np.uint8)
    pred = np.empty((num_nodes, num_nodes), dtype=dtype)
    _bfs_all_sources(edge_index[0], edge_index[1], num_nodes, spd, pred, dtype.type(schema.pred_sentinel(dtype)))
    return spd, pred


def _eigh(symmetric: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of stacked symmetric matrices, ascending. float32 through torch: the results are
    stored as float16, and torch's batched float32 LAPACK path is ~1.5× numpy's float64 one on the
    small matrices of molecules, where these decompositions dominate the structure cost."""
    values, vectors = torch.linalg.eigh(torch.from_numpy(symmetric.astype(np.float32)))
    return values.numpy().astype(np.float64), vectors.numpy().astype(np.float64)


def _svd_encodings(adj: np.ndarray, rank: int) -> np.ndarray:
    """[G, N, 2r] float16: U√Σ ‖ V√Σ of A+I for stacked adjacencies [G, N, N] of one size N.

    For symmetric A (undirected graphs) the SVD comes from the cheaper eigendecomposition
    A+I = Q Λ Qᵀ: σ = |λ|, U = Q, V = Q·sign(λ), ordered by σ descending."""
    g, n, _ = adj.shape
    a_plus_i = adj + np.eye(n)[None]
    keep = min(rank, n)
    if np.array_equal(adj, np.swapaxes(adj, 1, 2)):
        lam, q = _eigh(a_plus_i)
        order = np.argsort(-np.abs(lam), axis=1, kind="stable")[:, :keep]
        lam = np.take_along_axis(lam, order, axis=1)
        u = np.take_along_axis(q, order[:, None, :], axis=2)
        s, v = np.abs(lam), u * np.where(lam < 0, -1.0, 1.0)[:, None, :]
    else:
        u, s, vh = np.linalg.svd(a_plus_i)
        u, s, v = u[:, :, :keep], s[:, :keep], np.swapaxes(vh, 1, 2)[:, :, :keep]
    root_s = np.sqrt(s)[:, None, :]
    out = np.zeros((g, n, 2 * rank), dtype=np.float64)
    out[:, :, :keep] = u * root_s
    out[:, :, rank : rank + keep] = v * root_s
    return out.astype(np.float16)


def normalized_laplacian(adj: np.ndarray) -> np.ndarray:
    """I − D^-½ A_sym D^-½ for stacked adjacencies [G, N, N]; isolated nodes get a 1 on the diagonal.

    Directed inputs are symmetrised first: the Laplacian encoding is defined for undirected graphs."""
    sym = np.maximum(adj, np.swapaxes(adj, 1, 2))
    deg = sym.sum(axis=2)
    inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    n = adj.shape[1]
    return np.eye(n)[None] - inv_sqrt[:, :, None] * sym * inv_sqrt[:, None, :]


def _laplacian_encodings(adj: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """([G, N, k] float16 eigenvectors, [G, k] float16 eigenvalues), smallest eigenvalues first."""
    g, n, _ = adj.shape
    eigval, eigvec = _eigh(normalized_laplacian(adj))
    keep = min(k, n)
    vecs = np.zeros((g, n, k), dtype=np.float64)
    vals = np.zeros((g, k), dtype=np.float64)
    vecs[:, :, :keep] = eigvec[:, :, :keep]
    vals[:, :keep] = np.clip(eigval[:, :keep], 0.0, 2.0)  # round-off can leave -1e-16
    return vecs.astype(np.float16), vals.astype(np.float16)




def structure_many(graphs: list[tuple[np.ndarray, int]], options: StructureOptions) -> list[dict[str, np.ndarray]]:
    """Structural arrays for each (edge_index, num_nodes); one dict of record keys per graph.

    Graphs of equal size are stacked so that degrees and the eigen/singular decompositions run as
    a few array operations per size instead of dozens of calls per graph."""
    results: list[dict[str, np.ndarray]] = [{} for _ in graphs]
    by_size: dict[int, list[int]] = {}
    for i, (_, n) in enumerate(graphs):
        by_size.setdefault(n, []).append(i)
    for n, members in by_size.items():
        g = len(members)
        counts = [graphs[i][0].shape[1] for i in members]
        graph_of_edge = np.repeat(np.arange(g), counts)
        src = np.concatenate([graphs[i][0][0] for i in members]).astype(np.int64)
        dst = np.concatenate([graphs[i][0][1] for i in members]).astype(np.int64)
        adj = np.zeros((g, n, n), dtype=bool)
        adj[graph_of_edge, src, dst] = True
        if options.spd:
            for i in members:
                results[i][schema.SPD], results[i][schema.PRED] = shortest_paths(graphs[i][0], n)
                if options.paths == "floyd-warshall":
                    results[i][schema.FW_MID] = floyd_warshall.floyd_warshall_mid(graphs[i][0], n)
        if options.degree:
            in_deg = np.bincount(graph_of_edge * n + dst, minlength=g * n).reshape(g, n)
            out_deg = np.bincount(graph_of_edge * n + src, minlength=g * n).reshape(g, n)
            largest = np.maximum(in_deg.max(axis=1, initial=0), out_deg.max(axis=1, initial=0)).tolist()
            in8, out8 = in_deg.astype(np.uint8), out_deg.astype(np.uint8)  # what nearly every graph needs
            for j, i in enumerate(members):
                if largest[j] <= _UINT8_MAX:
                    results[i][schema.IN_DEGREE], results[i][schema.OUT_DEGREE] = in8[j], out8[j]
                else:
                    dtype = schema.smallest_uint(largest[j])
                    results[i][schema.IN_DEGREE], results[i][schema.OUT_DEGREE] = in_deg[j].astype(dtype), out_deg[j].astype(dtype)
        if options.svd_rank or options.lap_k:
            adj_f = adj.astype(np.float64)
            if options.svd_rank:
                svd = _svd_encodings(adj_f, options.svd_rank)
                for j, i in enumerate(members):
                    results[i][schema.SVD_PE] = svd[j]
            if options.lap_k:
                vecs, vals = _laplacian_encodings(adj_f, options.lap_k)
                for j, i in enumerate(members):
                    results[i][schema.LAP_PE], results[i][schema.LAP_EIGVAL] = vecs[j], vals[j]
    return results


def structure(edge_index: np.ndarray, num_nodes: int, options: StructureOptions = StructureOptions()) -> dict[str, np.ndarray]:
    """Structural arrays of one graph (see `structure_many`)."""
    return structure_many([(edge_index, num_nodes)], options)[0]
