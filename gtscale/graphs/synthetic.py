"""A seeded generator of anomaly-detection graphs of any size up to T-Social's, made in blocks.

- Degrees follow a power law: each edge endpoint is node perm[⌊N·u²⌋] for uniform u, so the node
  of popularity rank r is drawn with probability ∝ r^−½ and the degree distribution has the tail
  P(d) ∝ d^−3 of preferential-attachment graphs; `perm` hides the rank in the node id.

Labels come in two kinds.

Planted anomalies (the default). A fraction `anomaly_ratio` of the nodes are anomalies (label 1).
Their own features are shifted (+`feature_shift` in the first 3 of the features, ×1.5 spread in the
next 2), weak evidence on its own; their neighbourhoods differ too: a share `anomaly_edge_share` of
all edges joins two anomalies, so anomalies have far more anomalous neighbours than the base rate,
which neighbourhood aggregation (a GNN, or attention over an ego subgraph) can learn and a per-node
model cannot.

A planted neighbour signal (`neighbour_signal` = s in [0, 1]). Features are i.i.d. standard normal
and no edge is planted; the labels follow from the built graph by a stated rule:

    a_v = x_v · w                     w: a seeded random unit vector (recorded in the manifest)
    m_v = mean of a_u over v's stored neighbours u (0 for a node without any)
    score_v = √(1 − s) · z(a)_v + √s · z(m)_v        z: standardised over all nodes
    label 1 for the round(anomaly_ratio · N) highest scores

so s is the share of the score's variance that comes from the neighbours' features. At s = 0 a
node's own features decide its label (a features-only logistic regression is perfect); as s rises
a features-only model is capped ever lower, while a model that sees the mean of every neighbour's
features can still rank perfectly. Sampling only some neighbours (a 5 % induced subgraph keeps
about 5 % of them) estimates m_v with noise; sampling more, or reading all, estimates it better.

Every block is drawn from its own generator seeded by (seed, stream, block), so a second pass
over the edges yields the same edges without storing them.
"""

from __future__ import annotations

import numpy as np

from gtscale.graphs.sources import GraphSource

TSOCIAL_NODES = 5_781_065
TSOCIAL_EDGES = 73_105_508
_LABELS, _PERM, _EDGES, _FEATURES, _DIRECTION = 0, 1, 2, 3, 4  # seed streams


def synthetic_source(num_nodes: int, num_edges: int, seed: int = 0, num_features: int = 10, anomaly_ratio: float = 0.03,
                     anomaly_edge_share: float = 0.02, feature_shift: float = 0.5, block: int = 1 << 22,
                     neighbour_signal: float | None = None) -> GraphSource:
    """The generated graph; `neighbour_signal` s switches from planted anomalies to the planted
    neighbour signal (see the module docstring; anomaly_edge_share and feature_shift then unused)."""
    if num_nodes < 2 or num_edges < 1:
        raise ValueError("a synthetic graph needs at least 2 nodes and 1 edge")
    planted = neighbour_signal is not None
    if planted and not 0 <= neighbour_signal <= 1:
        raise ValueError("neighbour_signal must be in [0, 1]")
    labels = None if planted else (np.random.default_rng([seed, _LABELS]).random(num_nodes) < anomaly_ratio).astype(np.int8)
    anomalies = np.zeros(0, np.int64) if planted else np.flatnonzero(labels).astype(np.int64)
    perm = np.random.default_rng([seed, _PERM]).permutation(num_nodes).astype(np.int64)

    def edge_blocks():
        for b, start in enumerate(range(0, num_edges, block)):
            count = min(block, num_edges - start)
            rng = np.random.default_rng([seed, _EDGES, b])
            ends = perm[(num_nodes * rng.random((2, count)) ** 2).astype(np.int64)]
            planted_edges = int(round(count * anomaly_edge_share)) if len(anomalies) > 1 else 0
            ends[:, :planted_edges] = anomalies[rng.integers(0, len(anomalies), (2, planted_edges))]
            yield start, ends[0], ends[1], None

    def feature_blocks(rows: int = 1 << 20):
        for b, start in enumerate(range(0, num_nodes, rows)):
            stop = min(start + rows, num_nodes)
            x = np.random.default_rng([seed, _FEATURES, b]).standard_normal((stop - start, num_features), dtype=np.float32)
            if not planted:
                anomalous = labels[start:stop] == 1
                x[anomalous, :3] += feature_shift
                x[anomalous, 3:5] *= 1.5
            yield start, x

    params = {"source": "synthetic", "nodes": num_nodes, "edges": num_edges, "seed": seed, "num_features": num_features,
              "anomaly_ratio": anomaly_ratio}
    name = f"synthetic-{num_nodes}-{num_edges}-s{seed}"
    graph_labels = None
    if planted:
        direction = np.random.default_rng([seed, _DIRECTION]).standard_normal(num_features)
        direction /= np.linalg.norm(direction)
        params |= {"neighbour_signal": neighbour_signal, "label_rule": "score = √(1−s)·z(x·w) + √s·z(mean of neighbours' x·w); "
                   "the round(anomaly_ratio·N) highest scores are anomalies", "direction_w": [round(float(v), 6) for v in direction]}
        name += f"-nb{neighbour_signal:g}"

        def graph_labels(indptr, indices, features):
            return planted_labels(indptr, indices, features, direction, neighbour_signal, anomaly_ratio)
    else:
        params |= {"anomaly_edge_share": anomaly_edge_share, "feature_shift": feature_shift}
    return GraphSource(name, num_nodes, edge_blocks, feature_blocks, num_features, labels, graph_labels=graph_labels,
                       files={"edges": "synthetic edges", "features": "synthetic features", "labels": "synthetic labels"}, params=params)


def neighbour_means(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, rows: int = 1 << 18) -> np.ndarray:
    """float64 [N]: the mean of `values` over each node's stored neighbours (0 without any), read
    from the CSR in blocks of rows (one pass over indices; memory of one block's entries)."""
    n = len(indptr) - 1
    out = np.zeros(n, np.float64)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        lo, hi = int(indptr[start]), int(indptr[stop])
        sums = np.concatenate([[0.0], np.cumsum(values[np.asarray(indices[lo:hi])], dtype=np.float64)])
        ptr = np.asarray(indptr[start : stop + 1]) - lo
        degree = np.diff(ptr)
        out[start:stop] = (sums[ptr[1:]] - sums[ptr[:-1]]) / np.maximum(degree, 1)
    return out


def planted_labels(indptr: np.ndarray, indices: np.ndarray, features: np.ndarray, direction: np.ndarray, neighbour_signal: float,
                   anomaly_ratio: float, rows: int = 1 << 20) -> np.ndarray:
    """int8 [N]: the planted neighbour signal's labels (the module docstring's rule) of a built CSR
    and its features."""
    n = len(indptr) - 1
    own = np.empty(n, np.float64)
    for start in range(0, n, rows):
        own[start : start + rows] = np.asarray(features[start : start + rows], np.float64) @ direction
    mean = neighbour_means(indptr, indices, own)

    def standardised(v: np.ndarray) -> np.ndarray:
        spread = v.std()
        return (v - v.mean()) / spread if spread > 0 else np.zeros_like(v)

    score = np.sqrt(1 - neighbour_signal) * standardised(own) + np.sqrt(neighbour_signal) * standardised(mean)
    count = min(n, max(1, int(round(anomaly_ratio * n))))
    labels = np.zeros(n, np.int8)
    labels[np.argpartition(-score, count - 1)[:count]] = 1
    return labels
