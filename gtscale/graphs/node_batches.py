"""EdgeBatches of a graph store's nodes, as the edge-list loaders (induced.py, fanout.py) hand them
to the models that take edge lists (sparse ET, MNA-GT): the nodes' features, the targets' global
ids and labels, and the filler batch a rank out of evaluation batches runs."""

from __future__ import annotations

import numpy as np
import torch

from gtscale.format import schema
from gtscale.graphs.online import StoreLoader
from gtscale.graphs.store import GraphStore
from gtscale.loader.batch import FILLER_IDX
from gtscale.loader.edge_batch import EdgeBatch

#: Batch fields these loaders provide besides node features and edges.
PROVIDED_KEYS = (schema.TARGET_Y,)


def store_edge_batch(store: GraphStore, nodes: np.ndarray, edge_index: np.ndarray, target_rows: np.ndarray, idx: np.ndarray,
                     graph_index: np.ndarray | None = None, num_graphs: int = 1, padded_nodes: int = 0, filler_graph_nodes: int = 1) -> EdgeBatch:
    """One EdgeBatch of `nodes` (global ids) with `edge_index` (positions in nodes), scoring the
    nodes at `target_rows`: target_id their global ids, target_y their labels (unknown: masked).

    With `padded_nodes` above len(nodes), isolated, featureless, unscored nodes are appended up to
    that count, in filler graphs of at most `filler_graph_nodes` nodes each (idx FILLER_IDX), so
    that no graph grows and no output of the batch's own nodes changes. Built in numpy and handed
    to torch once: torch's cat and bincount took 20 times numpy's time on fan-out batches."""
    count, target_rows = len(nodes), np.asarray(target_rows, np.int64)
    total, extra = max(count, padded_nodes), max(padded_nodes - count, 0)
    labels = np.asarray(store.labels[nodes[target_rows]], np.int64)
    features = np.zeros((total, store.features.shape[1]), np.float32)
    features[:count] = np.take(np.asarray(store.features), nodes, axis=0)  # np.take: a fifth of a memmap's fancy indexing
    graph_index = np.zeros(count, np.int64) if graph_index is None else np.asarray(graph_index, np.int64)
    fillers = -(-extra // filler_graph_nodes)
    graph_index = np.concatenate([graph_index, num_graphs + np.arange(extra) // filler_graph_nodes])
    idx = np.concatenate([np.asarray(idx, np.int64), np.full(fillers, FILLER_IDX, np.int64)])
    return EdgeBatch(
        edge_index=torch.from_numpy(np.ascontiguousarray(edge_index, np.int64)), graph_index=torch.from_numpy(graph_index),
        num_graphs=num_graphs + fillers, node_feat_float=torch.from_numpy(features),
        target_rows=torch.from_numpy(target_rows), target_id=torch.from_numpy(np.asarray(nodes[target_rows], np.int64)),
        target_y=torch.from_numpy((labels == 1).astype(np.float32)), target_y_mask=torch.from_numpy(labels >= 0),
        idx=torch.from_numpy(idx), max_graph_nodes=int(np.bincount(graph_index).max()) if total else 0,
    )


class EdgeStoreLoader(StoreLoader):
    """A `StoreLoader` of EdgeBatches."""

    def filler_batch(self) -> EdgeBatch:
        """One node, no edge, no target (idx FILLER_IDX): what a rank out of evaluation batches runs."""
        width = int(self._manifest["features"]["node_float"])
        empty = torch.zeros(0, dtype=torch.long)
        return EdgeBatch(edge_index=torch.zeros(2, 0, dtype=torch.long), graph_index=torch.zeros(1, dtype=torch.long), num_graphs=1,
                         node_feat_float=torch.zeros(1, width), target_rows=empty, target_id=empty, target_y=torch.zeros(0),
                         target_y_mask=torch.zeros(0, dtype=torch.bool), idx=torch.tensor([FILLER_IDX]))
