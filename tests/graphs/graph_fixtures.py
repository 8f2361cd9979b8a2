"""Small graph sources written to disk for the graph tests."""

from pathlib import Path

import numpy as np


def write_plain(folder: Path, edges: np.ndarray, num_nodes: int, seed: int = 0, splits: dict | None = None) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "edges.npy", edges)
    np.save(folder / "features.npy", rng.standard_normal((num_nodes, 4)).astype(np.float32))
    labels = (rng.random(num_nodes) < 0.2).astype(np.int64)
    labels[::7] = -1
    np.save(folder / "labels.npy", labels)
    if splits is not None:
        np.savez(folder / "splits.npz", **splits)
    return folder


def random_edges(num_nodes: int, num_edges: int, seed: int, dtype=np.int64) -> np.ndarray:
    """Edges with repeats, reversed repeats and self-loops, as real edge lists have."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, num_nodes, (num_edges, 2))
    edges[: num_edges // 10] = edges[num_edges // 10 : 2 * (num_edges // 10), ::-1]  # reversed repeats
    edges[-5:, 1] = edges[-5:, 0]  # self-loops
    return edges.astype(dtype)


def scipy_csr(edges: np.ndarray, num_nodes: int):
    """The reference: scipy.sparse's symmetrised, deduplicated adjacency without self-loops."""
    import scipy.sparse as sp

    a = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(num_nodes, num_nodes)).tocsr()
    a = ((a + a.T) > 0).astype(np.int8)
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a
