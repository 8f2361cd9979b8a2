"""Subgraph samplers over a GraphStore's CSR, compiled with numba.

Ego subgraphs (for the dense models): hop by hop from the target, each frontier node (in the order
nodes joined) adds its not-yet-included neighbours, at most `fanouts[h]` of them at hop h+1 — those
with the smallest priority key(seed, target, neighbour), in key order — until `max_nodes` nodes are
in. The target is node 0; the others are numbered in the order they joined. The edges are all
stored edges among the chosen nodes (both directions, as molecules store theirs), and the
structural matrices come from gtscale.prep.structure exactly as for molecules.

The priority is a splitmix64 hash, not a random stream, so an ego subgraph depends only on
(seed, target): the same in every worker, rank and resumed run, and reproducible by a plain BFS.

Node-induced subgraphs (for models that attend along edges): a seeded random fraction of the
nodes (or of a pool, e.g. the training nodes) and every edge among them, as a local edge list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from gtscale.graphs.csr_check import require_checked
from gtscale.prep.structure import StructureOptions, structure_many

# splitmix64's finalizer (mix), the hash of every seeded choice of the graph samplers: the ego
# sampler's neighbour priorities and the induced loader's node keys (graphs/induced.py). It is a
# bijection of 64-bit integers, so distinct inputs never tie. Compiled as `_mix`; `_mix_py` is the
# same function in plain Python, for seeds and for the reference BFS of the tests and the bench.
_M64 = (1 << 64) - 1
_GOLDEN, _MUL1, _MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix_py(x: int) -> int:
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * _MUL1) & _M64
    x = ((x ^ (x >> 27)) * _MUL2) & _M64
    return x ^ (x >> 31)


def priority_py(seed: int, target: int, node: int) -> int:
    """The priority key mix(mix(mix(seed) ^ target) ^ node) in plain Python (for reference
    implementations and tests); the compiled sampler computes the same 64-bit value."""
    return _mix_py(_mix_py(_mix_py(seed & _M64) ^ target) ^ node)


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(x):
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_MUL1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_MUL2)
    return x ^ (x >> np.uint64(31))


def seed_key(seed: int) -> np.uint64:
    """mix(seed): what the compiled samplers mix their inputs with."""
    return np.uint64(_mix_py(seed & _M64))


@numba.njit(cache=True, nogil=True)
def _node_keys(key, num_nodes):
    keys = np.empty(num_nodes, np.uint64)
    for v in range(num_nodes):
        keys[v] = _mix(key ^ np.uint64(v))
    return keys


def node_keys(seed: int, num_nodes: int) -> np.ndarray:
    """uint64 [num_nodes]: mix(mix(seed) ^ node), distinct for distinct nodes (mix is a bijection)."""
    return _node_keys(seed_key(seed), num_nodes)


@numba.njit(cache=True, nogil=True)
def _ego_nodes(indptr, indices, target, fanouts, max_nodes, seed_key, local, nodes, best_key, best_node):
    """Fill nodes[:n] (and local[node] = position); returns n. seed_key = mix(seed)."""
    base = _mix(seed_key ^ np.uint64(target))
    nodes[0] = target
    local[target] = 0
    n = 1
    start, stop = 0, 1
    for h in range(fanouts.shape[0]):
        cap = fanouts[h]
        for f in range(start, stop):
            u = nodes[f]
            kept = 0  # best_key/best_node[:kept]: the `cap` smallest (key, node), ascending
            for k in range(indptr[u], indptr[u + 1]):
                v = indices[k]
                key = _mix(base ^ np.uint64(v))
                # The key test first: a neighbour that would not make the cut is skipped whether or
                # not it is already in, which spares most lookups of `local` (cache misses) on hubs.
                if kept == cap and (key > best_key[kept - 1] or (key == best_key[kept - 1] and v > best_node[kept - 1])):
                    continue
                if local[v] >= 0:
                    continue
                i = kept if kept < cap else cap - 1
                while i > 0 and (best_key[i - 1] > key or (best_key[i - 1] == key and best_node[i - 1] > v)):
                    best_key[i], best_node[i] = best_key[i - 1], best_node[i - 1]
                    i -= 1
                best_key[i], best_node[i] = key, v
                if kept < cap:
                    kept += 1
            for j in range(kept):
                if n == max_nodes:
                    return n
                local[best_node[j]] = n
                nodes[n] = best_node[j]
                n += 1
        start, stop = stop, n
    return n


@numba.njit(cache=True, nogil=True)
def _edges_among(indptr, indices, nodes, n, local, bits, scratch, nbr, out_src, out_dst):
    """Local (src, dst) of every stored edge among nodes[:n], by source then neighbour id (the CSR
    row order); returns the count. local[nodes[i]] == i on entry; bits: a zeroed bitset of the
    graph's nodes (left zeroed); scratch: int64 [5, ≥n]; nbr: int64 [≥n, ≥n].

    The store is symmetric, so each pair is looked up once, in the row of its endpoint of smaller
    (degree, id): a short row is scanned against a bitset of the chosen nodes (N/8 bytes, 0.7 MB
    for T-Social: it stays in cache, where the 4-byte `local` entries of the old scan missed it,
    and its test is almost always false, so well predicted), a long one binary-searched for each of
    the other endpoints. Hubs' rows, most of the adjacency that an ego subgraph touches, are then
    rarely read."""
    key, cand_id, cand_local, done, low = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    for i in range(n):
        v = nodes[i]
        key[i] = ((indptr[v + 1] - indptr[v]) << 32) | v  # (degree, id); ids < 2³¹ (int32 indices)
        done[i] = 0
        bits[v >> 6] |= np.uint64(1) << np.uint64(v & 63)
    for i in range(n):  # every row's first id, read in one pass of independent loads: their cache
        v = nodes[i]  # and TLB misses overlap instead of stalling the row scans one by one
        low[i] = indices[indptr[v]] if indptr[v + 1] > indptr[v] else np.iinfo(np.int64).max
    by_rank = np.argsort(key[:n])
    count = nbr[:n, 0]  # nbr[i, 0]: how many neighbours follow in nbr[i, 1:]
    count[:] = 0
    later = 0  # cand_*[:later]: the endpoints of larger (degree, id), by id; done[j] = 1 for them
    for t in range(n - 1, -1, -1):
        i = by_rank[t]
        u = nodes[i]
        lo, hi = indptr[u], indptr[u + 1]
        if later and low[i] <= cand_id[later - 1]:  # else no candidate can be in this row
            deg = hi - lo
            log2 = 1
            while (1 << log2) < deg:
                log2 += 1
            if deg <= 8 * later * (log2 + 1):  # scan the row through the bitset
                for k in range(lo, hi):
                    v = indices[k]
                    if (bits[v >> 6] >> np.uint64(v & 63)) & np.uint64(1):
                        j = local[v]
                        if done[j]:
                            count[i] += 1
                            nbr[i, count[i]] = j
                            count[j] += 1
                            nbr[j, count[j]] = i
            else:  # binary search: for each candidate, the first position in [lo, hi) with id ≥ it
                for q in range(later):
                    v = cand_id[q]
                    top = hi
                    while lo < top:
                        mid = (lo + top) >> 1
                        if indices[mid] < v:
                            lo = mid + 1
                        else:
                            top = mid
                    if lo == hi:
                        break
                    if indices[lo] == v:
                        j = cand_local[q]
                        count[i] += 1
                        nbr[i, count[i]] = j
                        count[j] += 1
                        nbr[j, count[j]] = i
                        lo += 1
        q = later  # insert u into the candidates, keeping them sorted by id
        while q > 0 and cand_id[q - 1] > u:
            cand_id[q], cand_local[q] = cand_id[q - 1], cand_local[q - 1]
            q -= 1
        cand_id[q], cand_local[q] = u, i
        done[i] = 1
        later += 1
    for i in range(n):
        v = nodes[i]
        bits[v >> 6] = np.uint64(0)
    e = 0
    for i in range(n):
        first = e
        for t in range(1, count[i] + 1):  # by neighbour id: insertion sort of a short list
            j, k = nbr[i, t], e
            while k > first and nodes[out_dst[k - 1]] > nodes[j]:
                out_dst[k] = out_dst[k - 1]
                k -= 1
            out_dst[k] = j
            out_src[e] = i
            e += 1
    return e


@numba.njit(cache=True, nogil=True)
def _ego_batch(indptr, indices, targets, fanouts, max_nodes, seed_key, local, bits, best_key, best_node):
    """Ego subgraphs of many targets: concatenated nodes and local edges with offsets."""
    t = targets.shape[0]
    node_ptr = np.zeros(t + 1, np.int64)
    edge_ptr = np.zeros(t + 1, np.int64)
    all_nodes = np.empty(t * max_nodes, np.int64)
    src = np.empty(16 * t * max_nodes, np.int32)
    dst = np.empty(16 * t * max_nodes, np.int32)
    scratch_src = np.empty(max_nodes * max_nodes, np.int32)
    scratch_dst = np.empty(max_nodes * max_nodes, np.int32)
    scratch = np.empty((5, max_nodes), np.int64)
    nbr = np.empty((max_nodes, max_nodes), np.int64)
    for b in range(t):
        nodes = all_nodes[node_ptr[b] : node_ptr[b] + max_nodes]
        n = _ego_nodes(indptr, indices, targets[b], fanouts, max_nodes, seed_key, local, nodes, best_key, best_node)
        e = _edges_among(indptr, indices, nodes, n, local, bits, scratch, nbr, scratch_src, scratch_dst)
        for i in range(n):
            local[nodes[i]] = -1
        node_ptr[b + 1] = node_ptr[b] + n
        if edge_ptr[b] + e > src.shape[0]:
            grown = max(2 * src.shape[0], edge_ptr[b] + e)
            src2, dst2 = np.empty(grown, np.int32), np.empty(grown, np.int32)
            src2[: edge_ptr[b]], dst2[: edge_ptr[b]] = src[: edge_ptr[b]], dst[: edge_ptr[b]]
            src, dst = src2, dst2
        src[edge_ptr[b] : edge_ptr[b] + e] = scratch_src[:e]
        dst[edge_ptr[b] : edge_ptr[b] + e] = scratch_dst[:e]
        edge_ptr[b + 1] = edge_ptr[b] + e
    return all_nodes[: node_ptr[t]], node_ptr, src[: edge_ptr[t]], dst[: edge_ptr[t]], edge_ptr


@dataclass
class EgoSubgraph:
    target: int
    nodes: np.ndarray  # global ids, nodes[0] == target
    edge_index: np.ndarray  # [2, E] local ids, both directions


class EgoSampler:
    """k-hop ego subgraphs with per-hop fan-out caps and a node cap (see the module docstring).

    Holds an int32 scratch array of one entry per graph node and a bitset of them (23 + 0.7 MB for
    T-Social): make one per worker, not per call."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, fanouts=(16, 16), max_nodes: int = 64, seed: int = 0):
        if max_nodes < 1 or max_nodes > np.iinfo(np.uint16).max or not fanouts or min(fanouts) < 1:
            raise ValueError("max_nodes must be in 1..65535 and every fan-out ≥ 1")
        require_checked(indptr, indices)  # the compiled code trusts every row pointer and id
        self.indptr, self.indices = indptr, indices
        self.fanouts = np.asarray(fanouts, np.int64)
        self.max_nodes = int(max_nodes)
        self.seed_key = seed_key(seed)
        self.local = np.full(len(indptr) - 1, -1, np.int32)
        self.bits = np.zeros((len(indptr) + 62) // 64, np.uint64)  # the chosen nodes, as a bitset
        cap = int(self.fanouts.max())
        self.best_key, self.best_node = np.empty(cap, np.uint64), np.empty(cap, np.int64)

    def sample(self, targets) -> list[EgoSubgraph]:
        targets = np.atleast_1d(np.asarray(targets, np.int64))
        if len(targets) and (targets.min() < 0 or targets.max() >= len(self.local)):
            raise ValueError(f"target node ids must lie in 0..{len(self.local) - 1}")  # the compiled code does not check
        nodes, node_ptr, src, dst, edge_ptr = _ego_batch(self.indptr, self.indices, targets, self.fanouts, self.max_nodes,
                                                         self.seed_key, self.local, self.bits, self.best_key, self.best_node)
        edges = np.stack([src, dst]).astype(np.int64)  # one copy; each subgraph gets a view
        node_ptr, edge_ptr = node_ptr.tolist(), edge_ptr.tolist()
        return [EgoSubgraph(t, nodes[node_ptr[b] : node_ptr[b + 1]], edges[:, edge_ptr[b] : edge_ptr[b + 1]])
                for b, t in enumerate(targets.tolist())]


def ego_structures(subgraphs: list[EgoSubgraph], options: StructureOptions) -> list[dict[str, np.ndarray]]:
    """Structural arrays (spd, pred, degrees, SVD / Laplacian encodings) of ego subgraphs, computed
    by gtscale.prep.structure exactly as for molecules (equal-size subgraphs share LAPACK calls)."""
    return structure_many([(g.edge_index, len(g.nodes)) for g in subgraphs], options)  # any integer dtype


@numba.njit(cache=True, nogil=True)
def _induced(indptr, indices, nodes, local):
    for i in range(nodes.shape[0]):
        local[nodes[i]] = i
    count = 0
    for i in range(nodes.shape[0]):
        u = nodes[i]
        for k in range(indptr[u], indptr[u + 1]):
            if local[indices[k]] >= 0:
                count += 1
    src = np.empty(count, np.int64)
    dst = np.empty(count, np.int64)
    e = 0
    for i in range(nodes.shape[0]):
        u = nodes[i]
        for k in range(indptr[u], indptr[u + 1]):
            j = local[indices[k]]
            if j >= 0:
                src[e], dst[e] = i, j
                e += 1
    for i in range(nodes.shape[0]):
        local[nodes[i]] = -1
    return src, dst


def induced_edges(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray, local: np.ndarray) -> np.ndarray:
    """edge_index [2, E] (local ids: positions in `nodes`) of every stored edge among `nodes`, both
    directions. `local` is an int32 scratch array of one −1 per graph node, left as it was found."""
    require_checked(indptr, indices)  # the compiled code trusts every row pointer and id, and these:
    nodes = np.asarray(nodes, np.int64)
    if local.shape != (len(indptr) - 1,) or (len(nodes) and (nodes.min() < 0 or nodes.max() >= len(local))):
        raise ValueError(f"nodes must lie in 0..{len(indptr) - 2} and local hold one entry per graph node")
    src, dst = _induced(indptr, indices, nodes, local)
    return np.stack([src, dst])


def induced_subgraph(indptr: np.ndarray, indices: np.ndarray, fraction: float, seed: int, pool: np.ndarray | None = None):
    """(nodes: sorted global ids, edge_index [2, E] local ids): a seeded random `fraction` of `pool`
    (default: every node) and every stored edge among them, both directions."""
    if not 0 < fraction <= 1:
        raise ValueError("fraction must be in (0, 1]")
    num_nodes = len(indptr) - 1
    pool = np.arange(num_nodes) if pool is None else np.asarray(pool, np.int64)
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.choice(pool, int(round(fraction * len(pool))), replace=False)).astype(np.int64)
    return nodes, induced_edges(indptr, indices, nodes, np.full(num_nodes, -1, np.int32))
