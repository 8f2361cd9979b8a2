"""A seeded generator of anomaly-detection graphs of any size up to T-Social's, made in blocks.

- Degrees follow a power law: each edge endpoint is node perm[⌊N·u²⌋] for uniform u, so the node
  of popularity rank r is drawn with probability ∝ r^−½ and the degree distribution has the tail
  P(d) ∝ d^−3 of preferential-attachment graphs; `perm` hides the rank in the node id.
- A fraction `anomaly_ratio` of the nodes are anomalies (label 1). Their own features are shifted
  (+`feature_shift` in the first 3 of the features, ×1.5 spread in the next 2), weak evidence on its own;
  their neighbourhoods differ too: a share `anomaly_edge_share` of all edges joins two anomalies,
  so anomalies have far more anomalous neighbours than the base rate, which neighbourhood
  aggregation (a GNN, or attention over an ego subgraph) can learn and a per-node model cannot.
Every block is drawn from its own generator seeded by (seed, stream, block), so a second pass
over the edges yields the same edges without storing them.
"""

from __future__ import annotations

import numpy as np

from gtscale.graphs.sources import GraphSource

TSOCIAL_NODES = 5_781_065
TSOCIAL_EDGES = 73_105_508
_LABELS, _PERM, _EDGES, _FEATURES = 0, 1, 2, 3  # seed streams


def synthetic_source(num_nodes: int, num_edges: int, seed: int = 0, num_features: int = 10, anomaly_ratio: float = 0.03,
                     anomaly_edge_share: float = 0.02, feature_shift: float = 0.5, block: int = 1 << 22) -> GraphSource:
    if num_nodes < 2 or num_edges < 1:
        raise ValueError("a synthetic graph needs at least 2 nodes and 1 edge")
    labels = (np.random.default_rng([seed, _LABELS]).random(num_nodes) < anomaly_ratio).astype(np.int8)
    anomalies = np.flatnonzero(labels).astype(np.int64)
    perm = np.random.default_rng([seed, _PERM]).permutation(num_nodes).astype(np.int64)

    def edge_blocks():
        for b, start in enumerate(range(0, num_edges, block)):
            count = min(block, num_edges - start)
            rng = np.random.default_rng([seed, _EDGES, b])
            ends = perm[(num_nodes * rng.random((2, count)) ** 2).astype(np.int64)]
            planted = int(round(count * anomaly_edge_share)) if len(anomalies) > 1 else 0
            ends[:, :planted] = anomalies[rng.integers(0, len(anomalies), (2, planted))]
            yield start, ends[0], ends[1], None

    def feature_blocks(rows: int = 1 << 20):
        for b, start in enumerate(range(0, num_nodes, rows)):
            stop = min(start + rows, num_nodes)
            x = np.random.default_rng([seed, _FEATURES, b]).standard_normal((stop - start, num_features), dtype=np.float32)
            anomalous = labels[start:stop] == 1
            x[anomalous, :3] += feature_shift
            x[anomalous, 3:5] *= 1.5
            yield start, x

    params = {"source": "synthetic", "nodes": num_nodes, "edges": num_edges, "seed": seed, "num_features": num_features,
              "anomaly_ratio": anomaly_ratio, "anomaly_edge_share": anomaly_edge_share, "feature_shift": feature_shift}
    return GraphSource(f"synthetic-{num_nodes}-{num_edges}-s{seed}", num_nodes, edge_blocks, feature_blocks, num_features, labels,
                       files={"edges": "synthetic edges", "features": "synthetic features", "labels": "synthetic labels"}, params=params)
