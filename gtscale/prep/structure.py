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
stacked LAPACK call, which is what makes per-molecule linear algebra cheap, and one compiled
(numba) call for their BFS. Where twins (identical adjacency rows, e.g. the leaves that an ego
subgraph's fan-out caps hang off one parent) shrink the SVD encoding's eigenproblem at least 2×,
it is solved on the classes of twins instead, exactly (`_twin_reduced_svd_encodings`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

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
        if self.paths not in schema.PATH_RULES:
            raise ValueError(f"paths must be one of {schema.PATH_RULES}, got {self.paths!r}")
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


@numba.njit(cache=True, nogil=True)
def _bfs_stacked(src, dst, edge_ptr, n, spd, pred, no_pred):
    for b in range(spd.shape[0]):
        lo, hi = edge_ptr[b], edge_ptr[b + 1]
        _bfs_all_sources(src[lo:hi], dst[lo:hi], n, spd[b], pred[b], no_pred)


def _shortest_paths_stacked(src: np.ndarray, dst: np.ndarray, edge_ptr: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """`shortest_paths` of G graphs of one size in one compiled call: graph b's edges are
    src/dst[edge_ptr[b]:edge_ptr[b+1]]; returns stacked (spd [G,N,N], pred [G,N,N])."""
    dtype = schema.pred_dtype(num_nodes)
    g = len(edge_ptr) - 1
    spd = np.empty((g, num_nodes, num_nodes), dtype=np.uint8)
    pred = np.empty((g, num_nodes, num_nodes), dtype=dtype)
    _bfs_stacked(src, dst, np.asarray(edge_ptr, np.int64), num_nodes, spd, pred, dtype.type(schema.pred_sentinel(dtype)))
    return spd, pred


def _eigh(symmetric: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of stacked symmetric matrices, ascending. float32 through torch: the results are
    stored as float16, and torch's float32 LAPACK path is faster than numpy's float64 one on the
    small matrices of molecules, where these decompositions dominate the structure cost.

    One call per matrix, not one stacked call: a stacked call gives a matrix with repeated
    eigenvalues (a symmetric molecule; ~1 in 5 NCI molecules) another basis of that eigenspace
    depending on the other matrices in the stack, so a molecule's encodings would depend on which
    molecules share its shard, and `gtscale predict` could not reproduce them. ~40 µs more CPU per
    molecule (tests/prep/test_structure.py checks the independence).

    On one thread, whatever the caller's setting: MKL's threaded eigh changes the last bits from
    ~40 nodes on, so `gtscale predict` (torch's default threads) encoded large molecules otherwise
    than the sharder's one-thread workers did.

    torch is imported here, not with the module: it is ~1.5 s of a start-up that shards without
    these encodings (--svd-rank 0 --lap-k 0) or only prints --help does not need."""
    import torch

    tensor = torch.from_numpy(symmetric.astype(np.float32))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pairs = [torch.linalg.eigh(matrix) for matrix in tensor]
    finally:
        torch.set_num_threads(threads)
    if not pairs:
        return np.zeros(symmetric.shape[:2]), np.zeros(symmetric.shape)
    values = torch.stack([v for v, _ in pairs]).numpy().astype(np.float64)
    vectors = torch.stack([q for _, q in pairs]).numpy().astype(np.float64)
    return values, vectors


@numba.njit(cache=True, nogil=True)
def _twin_classes(adj, cls):
    """Classes of nodes with identical adjacency rows (twins): fills cls[i] with i's class, numbered
    in the order of their first node, and returns the count. Rows are compared as bitsets, found
    through a sort of their hashes."""
    n = adj.shape[0]
    words = (n + 63) // 64
    bits = np.zeros((n, words), np.uint64)
    key = np.empty(n, np.uint64)
    for i in range(n):
        h = np.uint64(0x9E3779B97F4A7C15)
        for j in range(n):
            if adj[i, j]:
                bits[i, j // 64] |= np.uint64(1) << np.uint64(j % 64)
        for w in range(words):
            h = (h ^ bits[i, w]) * np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(31)
        key[i] = h
    order = np.argsort(key, kind="mergesort")
    first = np.full(n, -1, np.int64)  # first node of each provisional class
    cls[:] = -1
    count = 0
    start = 0
    while start < n:  # one run of equal hashes: split by exact row comparison
        stop = start + 1
        while stop < n and key[order[stop]] == key[order[start]]:
            stop += 1
        for t in range(start, stop):
            i = order[t]
            for u in range(start, t):
                other = order[u]
                if first[other] == other:  # `other` leads a class of this run
                    same = True
                    for w in range(words):
                        if bits[i, w] != bits[other, w]:
                            same = False
                            break
                    if same:
                        cls[i] = cls[other]
                        break
            if cls[i] < 0:
                cls[i] = count
                first[i] = i
                count += 1
        start = stop
    # renumber classes by their smallest node, so the reduced matrix follows node order
    label = np.full(count, -1, np.int64)
    next_label = 0
    for i in range(n):
        if label[cls[i]] < 0:
            label[cls[i]] = next_label
            next_label += 1
        cls[i] = label[cls[i]]
    return count


@numba.njit(cache=True, nogil=True)
def _twin_reduced_svd_encodings(adj, rank, out):
    """U√Σ ‖ V√Σ of A+I into out[g] for the symmetric adjacencies adj [G, N, N] whose twin classes
    make the problem at least twice smaller; ok[g] says which (the others are left to eigh).

    Twins (nodes with identical rows of A, e.g. the leaves that an ego subgraph's fan-out caps hang
    off one parent) give A(e_i − e_j) = 0. With the orthonormal class indicators w_c = 1_c/√s_c,
    A = W R Wᵀ on their span, R[c, d] = √(s_c s_d)·A[c, d], and its complement is A's null space
    (eigenvalue 1 of A+I). So A+I's eigenpairs are those of R+I (an m×m problem, m = number of
    classes, ~10 for a 2-hop ego subgraph of 64 nodes), with x_i = y_c(i)/√s_c(i), plus eigenvalue 1
    — which must stay below the kept pairs, else the graph goes to eigh. Ordered and signed as
    `_svd_encodings` does for eigh's pairs: |λ| descending (ties: smaller λ first), U = x, V = x·sign(λ)."""
    g, n, _ = adj.shape
    keep = min(rank, n)
    ok = np.zeros(g, np.bool_)
    cls = np.empty(n, np.int64)
    for b in range(g):
        m = _twin_classes(adj[b], cls)
        if 2 * m > n:
            continue
        size = np.zeros(m)
        rep = np.empty(m, np.int64)
        for i in range(n - 1, -1, -1):
            size[cls[i]] += 1.0
            rep[cls[i]] = i
        reduced = np.empty((m, m))
        for c in range(m):
            for d in range(m):
                reduced[c, d] = np.sqrt(size[c] * size[d]) * adj[b, rep[c], rep[d]] + (1.0 if c == d else 0.0)
        lam, y = np.linalg.eigh(reduced)
        order = np.argsort(-np.abs(lam), kind="mergesort")  # stable, as _svd_encodings sorts eigh's
        if keep > m or abs(lam[order[keep - 1]]) <= 1.0 + 1e-7:
            continue  # the pairs reach the eigenvalue 1 of A's null space: eigh decides
        for j in range(keep):
            t = order[j]
            root = np.sqrt(abs(lam[t]))
            flip = 1.0 if lam[t] >= 0 else -1.0
            for i in range(n):
                x = y[cls[i], t] / np.sqrt(size[cls[i]]) * root
                out[b, i, j] = x
                out[b, i, rank + j] = x * flip
        ok[b] = True
    return ok


def twins_halve(adj: np.ndarray) -> np.ndarray:
    """bool [G]: whether the rows of each stacked adjacency [G, N, N] fall into at most N/2 classes of
    identical rows, the condition on which `_twin_reduced_svd_encodings` reduces a graph (it
    checks the condition itself, exactly so). Checked here first, in numpy, because few molecules
    meet it: a shard without such a graph never calls, so never compiles (~4 s of CPU on a cold
    numba cache) nor loads, the twin kernels."""
    g, n, _ = adj.shape
    rows = np.packbits(adj != 0, axis=2)  # each row as bytes: equal bytes exactly when the rows are equal
    distinct = np.array([len(np.unique(rows[b].view(np.dtype((np.void, rows.shape[2]))))) for b in range(g)], np.int64)
    return 2 * distinct <= n


def _svd_encodings(adj: np.ndarray, rank: int, reduce_twins: bool = True) -> np.ndarray:
    """[G, N, 2r] float16: U√Σ ‖ V√Σ of A+I for stacked adjacencies [G, N, N] of one size N
    (bool or float: converted to float64 only where eigh / svd need it).

    For symmetric A (undirected graphs) the SVD comes from the cheaper eigendecomposition
    A+I = Q Λ Qᵀ: σ = |λ|, U = Q, V = Q·sign(λ), ordered by σ descending: of the twin-reduced
    matrix where twins make it at least twice smaller (`_twin_reduced_svd_encodings`: most ego
    subgraphs), else of A+I itself in one stacked eigh (all of them with reduce_twins=False)."""
    g, n, _ = adj.shape
    keep = min(rank, n)
    out = np.zeros((g, n, 2 * rank), dtype=np.float64)
    if np.array_equal(adj, np.swapaxes(adj, 1, 2)):
        rest = np.arange(g)
        if reduce_twins and len(halved := np.flatnonzero(twins_halve(adj))):
            reduced = np.zeros((len(halved), n, 2 * rank))
            ok = _twin_reduced_svd_encodings(adj[halved], rank, reduced)
            out[halved[ok]] = reduced[ok]
            rest = np.setdiff1d(rest, halved[ok])
        if len(rest):
            lam, q = _eigh(adj[rest].astype(np.float64) + np.eye(n)[None])
            order = np.argsort(-np.abs(lam), axis=1, kind="stable")[:, :keep]
            lam = np.take_along_axis(lam, order, axis=1)
            u = np.take_along_axis(q, order[:, None, :], axis=2)
            s, v = np.abs(lam), u * np.where(lam < 0, -1.0, 1.0)[:, None, :]
            root_s = np.sqrt(s)[:, None, :]
            out[rest, :, :keep] = u * root_s
            out[rest, :, rank : rank + keep] = v * root_s
    else:
        u, s, vh = np.linalg.svd(adj.astype(np.float64) + np.eye(n)[None])
        u, s, v = u[:, :, :keep], s[:, :keep], np.swapaxes(vh, 1, 2)[:, :, :keep]
        root_s = np.sqrt(s)[:, None, :]
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
            spd, pred = _shortest_paths_stacked(src, dst, np.cumsum([0] + counts), n)
            for j, i in enumerate(members):
                results[i][schema.SPD], results[i][schema.PRED] = spd[j], pred[j]
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
        if options.svd_rank:
            svd = _svd_encodings(adj, options.svd_rank)
            for j, i in enumerate(members):
                results[i][schema.SVD_PE] = svd[j]
        if options.lap_k:
            vecs, vals = _laplacian_encodings(adj.astype(np.float64), options.lap_k)
            for j, i in enumerate(members):
                results[i][schema.LAP_PE], results[i][schema.LAP_EIGVAL] = vecs[j], vals[j]
    return results


def structure(edge_index: np.ndarray, num_nodes: int, options: StructureOptions = StructureOptions()) -> dict[str, np.ndarray]:
    """Structural arrays of one graph (see `structure_many`)."""
    return structure_many([(edge_index, num_nodes)], options)[0]


def warm_up(options: StructureOptions) -> None:
    """Compile (or load from numba's cache) the kernels every graph's structure calls, by computing
    that of a two-node graph: called in the parent before a pool of workers forks, so that they
    inherit the compiled code instead of each compiling it (~5 s of CPU apiece on a cold cache)."""
    structure(np.array([[0, 1], [1, 0]]), 2, options)
