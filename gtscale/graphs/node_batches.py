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


def pad_nodes(batch: EdgeBatch, num_nodes: int, graph_nodes: int) -> EdgeBatch:
    """`batch` with isolated, featureless, unscored nodes appended up to `num_nodes`, in filler
    graphs of at most `graph_nodes` nodes each (idx FILLER_IDX), so that no graph grows and no
    output of the batch's own nodes changes."""
    extra = num_nodes - batch.num_nodes
    if extra <= 0:
        return batch
    fillers = -(-extra // graph_nodes)
    graph = batch.num_graphs + torch.arange(extra) // graph_nodes
    return EdgeBatch(
        edge_index=batch.edge_index, graph_index=torch.cat([batch.graph_index, graph]), num_graphs=batch.num_graphs + fillers,
        node_feat_float=torch.cat([batch.node_feat_float, batch.node_feat_float.new_zeros(extra, batch.node_feat_float.shape[1])]),
        target_node=batch.target_node, target_id=batch.target_id, target_y=batch.target_y, target_y_mask=batch.target_y_mask,
        idx=torch.cat([batch.idx, torch.full((fillers,), FILLER_IDX, dtype=torch.long)]),
        max_graph_nodes=max(batch.max_graph_nodes, min(extra, graph_nodes)),
    )


def store_edge_batch(store: GraphStore, nodes: np.ndarray, edge_index: np.ndarray, target_node: np.ndarray, idx: np.ndarray,
                     graph_index: np.ndarray | None = None, num_graphs: int = 1) -> EdgeBatch:
    """One EdgeBatch of `nodes` (global ids) with `edge_index` (positions in nodes), scoring the
    nodes at `target_node`: target_id their global ids, target_y their labels (unknown: masked)."""
    target_node = np.asarray(target_node, np.int64)
    labels = np.asarray(store.labels[nodes[target_node]], np.int64)
    graph_index = np.zeros(len(nodes), np.int64) if graph_index is None else graph_index
    return EdgeBatch(
        edge_index=torch.from_numpy(np.ascontiguousarray(edge_index, np.int64)), graph_index=torch.from_numpy(graph_index),
        num_graphs=num_graphs, node_feat_float=torch.from_numpy(np.asarray(store.features[nodes], np.float32)),
        target_node=torch.from_numpy(target_node), target_id=torch.from_numpy(np.asarray(nodes[target_node], np.int64)),
        target_y=torch.from_numpy((labels == 1).astype(np.float32)), target_y_mask=torch.from_numpy(labels >= 0),
        idx=torch.from_numpy(np.asarray(idx, np.int64)),
    )


class EdgeStoreLoader(StoreLoader):
    """A `StoreLoader` of EdgeBatches."""

    def filler_batch(self) -> EdgeBatch:
        """One node, no edge, no target (idx FILLER_IDX): what a rank out of evaluation batches runs."""
        width = int(self._manifest["features"]["node_float"])
        empty = torch.zeros(0, dtype=torch.long)
        return EdgeBatch(edge_index=torch.zeros(2, 0, dtype=torch.long), graph_index=torch.zeros(1, dtype=torch.long), num_graphs=1,
                         node_feat_float=torch.zeros(1, width), target_node=empty, target_id=empty, target_y=torch.zeros(0),
                         target_y_mask=torch.zeros(0, dtype=torch.bool), idx=torch.tensor([FILLER_IDX]))
