"""Random graphs → dense Batches for the model tests, built independently of the data pipeline.

Graphs include disconnected ones (unreachable pairs) and single-node ones. Structure comes from
scipy's BFS; path_edges follows scipy's predecessor matrix; svd_pe is random per node (the
models treat it as a per-node input, which is all these tests need)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from gtscale.loader.batch import Batch
from gtscale.format.schema import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, FEATURE_SHIFT, SPD_MAX, SPD_UNREACHABLE

SVD_RANK = 4
LAP_K = 3
PATH_HOPS = 4


def random_graph(rng: np.random.Generator, n: int, components: int = 1) -> dict:
    """n nodes split into `components` random connected pieces (a random tree plus extra edges),
    with raw (unshifted) OGB-style categorical features."""
    pieces = np.array_split(rng.permutation(n), components)
    edges = set()
    for piece in pieces:
        for i in range(1, len(piece)):
            j = rng.integers(0, i)
            edges.add((int(piece[i]), int(piece[j])))
        for _ in range(len(piece) // 3):
            a, b = rng.choice(piece, 2) if len(piece) > 1 else (piece[0], piece[0])
            if a != b:
                edges.add((int(a), int(b)))
    undirected = sorted({tuple(sorted(e)) for e in edges})
    attr = np.stack([rng.integers(0, d, len(undirected)) for d in BOND_FEATURE_DIMS], axis=1) if undirected else np.zeros((0, 3), int)
    src = [a for a, b in undirected] + [b for a, b in undirected]
    dst = [b for a, b in undirected] + [a for a, b in undirected]
    return {
        "node_feat": np.stack([rng.integers(0, d, n) for d in ATOM_FEATURE_DIMS], axis=1),
        "edge_index": np.array([src, dst], dtype=np.int64).reshape(2, -1),
        "edge_feat": np.concatenate([attr, attr]) if len(undirected) else attr,
        "svd_pe": rng.standard_normal((n, 2 * SVD_RANK)).astype(np.float32),
        "lap_pe": rng.standard_normal((n, LAP_K)).astype(np.float32),
    }


def _structure(g: dict, n: int):
    src, dst = g["edge_index"]
    adj = csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    dist, pred = shortest_path(adj, unweighted=True, return_predecessors=True)
    spd = np.where(np.isfinite(dist), np.minimum(dist, SPD_MAX), SPD_UNREACHABLE).astype(np.int64)
    feat = {(int(a), int(b)): g["edge_feat"][k] + FEATURE_SHIFT for k, (a, b) in enumerate(zip(src, dst))}
    path = np.zeros((n, n, PATH_HOPS, len(BOND_FEATURE_DIMS)), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j or not np.isfinite(dist[i, j]):
                continue
            nodes = [j]
            while nodes[-1] != i:
                nodes.append(int(pred[i, nodes[-1]]))
            nodes.reverse()
            for d, (a, b) in enumerate(zip(nodes[:-1], nodes[1:PATH_HOPS + 1])):
                path[i, j, d] = feat[(a, b)]
    return spd, path, np.bincount(dst, minlength=n), np.bincount(src, minlength=n)


def make_batch(graphs: list[dict], pad_to: int | None = None) -> Batch:
    """Dense Batch of `graphs`, padded to the largest graph (or to `pad_to` nodes)."""
    sizes = [g["node_feat"].shape[0] for g in graphs]
    b, n = len(graphs), max(sizes + [pad_to or 0])
    fe = len(BOND_FEATURE_DIMS)
    out = {
        "node_feat": torch.zeros(b, n, len(ATOM_FEATURE_DIMS), dtype=torch.long),
        "node_mask": torch.zeros(b, n, dtype=torch.bool),
        "edge_feat": torch.zeros(b, n, n, fe, dtype=torch.long),
        "spd": torch.full((b, n, n), SPD_UNREACHABLE, dtype=torch.long),
        "in_degree": torch.zeros(b, n, dtype=torch.long),
        "out_degree": torch.zeros(b, n, dtype=torch.long),
        "svd_pe": torch.zeros(b, n, 2 * SVD_RANK),
        "lap_pe": torch.zeros(b, n, LAP_K),
        "path_edges": torch.zeros(b, n, n, PATH_HOPS, fe, dtype=torch.long),
    }
    for k, (g, size) in enumerate(zip(graphs, sizes)):
        spd, path, in_deg, out_deg = _structure(g, size)
        out["node_feat"][k, :size] = torch.from_numpy(g["node_feat"] + FEATURE_SHIFT)
        out["node_mask"][k, :size] = True
        src, dst = g["edge_index"]
        out["edge_feat"][k, src, dst] = torch.from_numpy(g["edge_feat"] + FEATURE_SHIFT).long()
        out["spd"][k, :size, :size] = torch.from_numpy(spd)
        out["in_degree"][k, :size] = torch.from_numpy(in_deg)
        out["out_degree"][k, :size] = torch.from_numpy(out_deg)
        out["svd_pe"][k, :size] = torch.from_numpy(g["svd_pe"])
        if "lap_pe" in g:  # hand-built graphs may leave it out (0 = no encoding)
            out["lap_pe"][k, :size] = torch.from_numpy(g["lap_pe"])
        out["path_edges"][k, :size, :size] = torch.from_numpy(path)
    return Batch(**out)


def permute_graph(batch: Batch, k: int, perm: torch.Tensor) -> Batch:
    """The batch with graph k's first len(perm) nodes relabelled: new node i = old node perm[i]."""
    n = len(perm)
    fields = {}
    for name in ("node_feat", "node_mask", "in_degree", "out_degree", "svd_pe", "lap_pe"):
        t = getattr(batch, name).clone()
        t[k, :n] = t[k, perm]
        fields[name] = t
    for name in ("edge_feat", "spd", "path_edges"):
        t = getattr(batch, name).clone()
        t[k, :n, :n] = t[k, perm][:, perm]
        fields[name] = t
    return Batch(**fields)


TINY_EGT = {
    "name": "egt", "num_layers": 2, "node_width": 16, "edge_width": 8, "num_heads": 4,
    "num_virtual_nodes": 2, "upto_hop": 4, "svd_rank": SVD_RANK, "output_edges": True,
}
TINY_GRAPHORMER = {
    "name": "graphormer", "num_layers": 2, "node_width": 16, "ffn_dim": 24, "num_heads": 4,
    "num_in_degree": 6, "num_out_degree": 6, "num_spatial": 8, "num_edge_dis": 6, "multi_hop_max_dist": 3,
}
TINY_ET = {
    "name": "et", "form": "dense", "node_width": 16, "num_heads": 2, "head_dim": 8, "num_memories": 24,
    "num_steps": 3, "step_size": 0.5, "lap_k": LAP_K,
}
TINY_ET_SPARSE = {**TINY_ET, "form": "sparse", "lap_k": 0, "cls_token": False, "learned_adjacency": False}
TINY_MNAGT = {
    "name": "mnagt", "num_layers": 2, "node_width": 16, "num_kernels": 3, "num_heads": 4, "ffn_dim": 24,
}
