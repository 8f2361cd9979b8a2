"""`EdgeBatch`: the edge-list view of B graphs, for models whose cost must not grow with N².

The dense `Batch` pads every graph to N nodes and keeps [B, N, N] pair tensors; a sampled subgraph
of a huge graph (10⁵ nodes, 10⁶ edges) cannot afford that. An EdgeBatch concatenates the nodes of
its graphs and renumbers their edges into one global list:

    node_feat       long  [N_tot, F]   categorical node features, shifted by schema.FEATURE_SHIFT (or None)
    node_feat_float float [N_tot, Fx]  continuous node features (or None); at least one of the two
    edge_index      long  [2, E]       row 0 = source, row 1 = target, global node ids; the target reads the source
    edge_feat       long  [E, Fe]      categorical edge features, shifted (or None)
    graph_index  long  [N_tot]      which graph each node belongs to (0..B-1, non-decreasing)
    lap_pe       float [N_tot, k]   Laplacian eigenvectors (or None)
    node_y, node_y_mask  [N_tot]    per-node targets and whether each is labelled (or None)
    target_rows  long  [K]          rows (of N_tot) whose outputs are scored (a sampled subgraph's seed nodes), or None = all:
                                    a model's node output then has one row per target, in this order (see below)
    target_id    long  [K]          node tasks on a huge graph: each target's global node id (FILLER_IDX on a filler batch)
    target_y, target_y_mask [K]     … its label (0/1 as float) and whether it is known
    y, y_mask    [B, T]             graph targets (or None)

The field names are Batch's (node_feat_float, edge_feat, target_id, …): a field present in both
means the same thing in both, laid out per node / edge instead of per padded graph. The scored
nodes are the exception, and are named apart: a Batch's target_pos [B, T] are positions within
each graph, an EdgeBatch's target_rows [K] are rows of the concatenated nodes.

Only the targets are read. So a model taking an EdgeBatch with target_rows returns the targets'
node rows alone, [K, d] (as DGL's message-flow graphs return their destination nodes), and may
leave out what no target depends on: the sparse ET runs its last steps only where they still reach
a target (gtscale/models/et/sparse.py), which on fan-out neighbourhoods is a small share of the
nodes.

Producers: `collate_edges(records, keys)` from decoded shard records (each record one graph; a
record may carry a float array "node_feat_float" next to the categorical "node_feat", and
"target_pos", the positions within its graph of the nodes that are scored), and `EdgeBatch.from_dense(batch)` from a dense Batch (its
edge_feat ≠ 0 entries become the edges). A huge-graph sampler produces records of this shape and
needs nothing else from this module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np
import torch

from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.shardfile import ShardError
from gtscale.loader.batch import Batch


@dataclass
class EdgeBatch:
    edge_index: torch.Tensor
    graph_index: torch.Tensor
    num_graphs: int
    node_feat: Optional[torch.Tensor] = None
    node_feat_float: Optional[torch.Tensor] = None
    edge_feat: Optional[torch.Tensor] = None
    lap_pe: Optional[torch.Tensor] = None
    node_y: Optional[torch.Tensor] = None
    node_y_mask: Optional[torch.Tensor] = None
    target_rows: Optional[torch.Tensor] = None
    target_id: Optional[torch.Tensor] = None
    target_y: Optional[torch.Tensor] = None
    target_y_mask: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    y_mask: Optional[torch.Tensor] = None
    idx: Optional[torch.Tensor] = None
    max_graph_nodes: Optional[int] = None  # nodes of the largest graph (padded layouts of per-graph attention); set where the batch is made

    def __post_init__(self):
        if self.node_feat is None and self.node_feat_float is None:
            raise ValueError("an EdgeBatch needs node_feat or node_feat_float")
        if self.max_graph_nodes is None:  # counted where the batch is made, so that models need not ask the device
            counts = torch.bincount(self.graph_index.cpu(), minlength=self.num_graphs)
            self.max_graph_nodes = int(counts.max()) if counts.numel() else 0

    @property
    def num_nodes(self) -> int:
        return self.graph_index.shape[0]

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def _map(self, fn) -> "EdgeBatch":
        return EdgeBatch(**{f.name: (fn(v) if isinstance(v, torch.Tensor) else v) for f in fields(self) for v in [getattr(self, f.name)]})

    def to(self, device, non_blocking: bool = False) -> "EdgeBatch":
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "EdgeBatch":
        return self._map(lambda t: t.pin_memory())

    @classmethod
    def from_dense(cls, batch: Batch) -> "EdgeBatch":
        """The same graphs as a dense Batch: real nodes in row-major (graph, node) order, an edge
        u → v wherever edge_feat[b, u, v] ≠ 0 (collate writes edge u → v there)."""
        mask = batch.node_mask
        b, n = mask.shape
        new_id = torch.full((b, n), -1, dtype=torch.long, device=mask.device)
        new_id[mask] = torch.arange(int(mask.sum()), device=mask.device)
        is_edge = (batch.edge_feat != 0).any(-1) & mask[:, :, None] & mask[:, None, :]
        g, u, v = is_edge.nonzero(as_tuple=True)
        node_y = batch.node_y[mask] if batch.node_y is not None else None
        return cls(
            edge_index=torch.stack([new_id[g, u], new_id[g, v]]),
            graph_index=torch.arange(b, device=mask.device)[:, None].expand(b, n)[mask],
            num_graphs=b,
            node_feat=batch.node_feat[mask],
            edge_feat=batch.edge_feat[g, u, v],
            lap_pe=batch.lap_pe[mask] if batch.lap_pe is not None else None,
            node_y=node_y,
            node_y_mask=batch.node_y_mask[mask] if batch.node_y_mask is not None else None,
            y=batch.y, y_mask=batch.y_mask, idx=batch.idx,
        )

    def to_dense_nodes(self, x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """Rows x [N_tot, ...] scattered into the dense layout [B, N, ...] of `node_mask` (zeros on padding)."""
        out = x.new_zeros(*node_mask.shape, *x.shape[1:])
        out[node_mask] = x
        return out


def _concat(records: Sequence[Record], key: str) -> np.ndarray:
    arrays = [r.arrays[key] for r in records]
    try:
        return np.concatenate(arrays)
    except ValueError:
        odd = next(r for r, a in zip(records, arrays) if a.shape[1:] != arrays[0].shape[1:])
        raise ShardError(odd.shard, odd.key, f"{key} has shape {odd.arrays[key].shape}, others in its batch differ") from None


def collate_edges(records: Sequence[Record], keys: Sequence[str] = ()) -> EdgeBatch:
    """EdgeBatch of `records` (one graph each) with the optional keys asked for: lap_pe, y,
    node_y, node_feat_float, target_pos. Node ids of each record are offset by the nodes before it."""
    sizes = np.fromiter((r.num_nodes for r in records), dtype=np.int64, count=len(records))
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    edges = []
    for r, off in zip(records, offsets):
        ei = r.arrays[schema.EDGE_INDEX].astype(np.int64)
        if ei.size and (ei.min() < 0 or ei.max() >= r.num_nodes):
            raise ShardError(r.shard, r.key, f"edge_index holds node ids outside 0..{r.num_nodes - 1}")
        edges.append(ei + off)
    out: dict = {
        "edge_index": np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int64),
        "graph_index": np.repeat(np.arange(len(records)), sizes),
        "node_feat": _concat(records, schema.NODE_FEAT).astype(np.int64) + schema.FEATURE_SHIFT,
        "edge_feat": _concat(records, schema.EDGE_FEAT).astype(np.int64) + schema.FEATURE_SHIFT,
        "idx": np.fromiter((r.idx for r in records), dtype=np.int64, count=len(records)),
    }
    if schema.NODE_FEAT_FLOAT in keys:
        out["node_feat_float"] = _concat(records, schema.NODE_FEAT_FLOAT).astype(np.float32)
    if schema.LAP_PE in keys:
        out["lap_pe"] = _concat(records, schema.LAP_PE).astype(np.float32)
    if schema.NODE_Y in keys:
        node_y = _concat(records, schema.NODE_Y).astype(np.float32).reshape(-1)
        out["node_y_mask"], out["node_y"] = ~np.isnan(node_y), np.nan_to_num(node_y, nan=0.0)
    if schema.Y in keys:
        y = np.stack([r.arrays[schema.Y] for r in records]).astype(np.float32).reshape(len(records), -1)
        out["y_mask"], out["y"] = ~np.isnan(y), np.nan_to_num(y, nan=0.0)
    if schema.TARGET_POS in keys:
        out["target_rows"] = np.concatenate([r.arrays[schema.TARGET_POS].astype(np.int64) + off for r, off in zip(records, offsets)])
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}
    return EdgeBatch(num_graphs=len(records), **tensors)
