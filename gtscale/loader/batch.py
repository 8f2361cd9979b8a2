"""`Batch`: what models see. Dense, padded to the largest graph of the batch.

Shapes use B graphs and N = the largest node count in the batch, T = the most target nodes of a
graph (node tasks on sampled subgraphs; 1 for ego subgraphs). Categorical features are
shifted by `schema.FEATURE_SHIFT` so that 0 means padding / no edge (see schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import torch


@dataclass
class Batch:
    node_feat: torch.Tensor  # long [B, N, F]; 0 on padding nodes
    node_mask: torch.Tensor  # bool [B, N]; True on real nodes
    edge_feat: torch.Tensor  # long [B, N, N, Fe]; 0 where there is no edge (and on padding)
    spd: Optional[torch.Tensor] = None  # long [B, N, N]; SPD_UNREACHABLE between components and on padding
    in_degree: Optional[torch.Tensor] = None  # long [B, N]; 0 on padding
    out_degree: Optional[torch.Tensor] = None  # long [B, N]
    svd_pe: Optional[torch.Tensor] = None  # float [B, N, 2r]; 0 on padding
    lap_pe: Optional[torch.Tensor] = None  # float [B, N, k]; 0 on padding
    lap_eigval: Optional[torch.Tensor] = None  # float [B, k]
    path_edges: Optional[torch.Tensor] = None  # long [B, N, N, D, Fe]; edge_feat of the d-th edge of the i→j path, 0 past its end
    y: Optional[torch.Tensor] = None  # float [B, T]; NaN replaced by 0 where y_mask is False
    y_mask: Optional[torch.Tensor] = None  # bool [B, T]; True where labelled
    node_y: Optional[torch.Tensor] = None  # float [B, N]
    node_y_mask: Optional[torch.Tensor] = None  # bool [B, N]
    idx: Optional[torch.Tensor] = None  # long [B]; the graph's idx in the source dataset (ego subgraph: the target's global id)
    node_feat_float: Optional[torch.Tensor] = None  # float [B, N, F]; continuous node features (node_feat is then [B, N, 0]); 0 on padding
    target_node: Optional[torch.Tensor] = None  # long [B, T]; position of each target node in its graph (0 on padding)
    target_id: Optional[torch.Tensor] = None  # long [B, T]; its global node id, −1 (FILLER_IDX) on padding and filler graphs
    target_y: Optional[torch.Tensor] = None  # float [B, T]; its label, 0 where target_y_mask is False
    target_y_mask: Optional[torch.Tensor] = None  # bool [B, T]; True where labelled
    graph_feat: Optional[torch.Tensor] = None  # float [B, G]; molecule-level input features (`gtscale shard --graph-features`)

    @property
    def num_graphs(self) -> int:
        return self.node_mask.shape[0]

    @property
    def max_nodes(self) -> int:
        return self.node_mask.shape[1]

    def to(self, device, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on `device` (floats keep their dtype; autocast handles precision)."""
        moved = {
            f.name: (v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }
        return Batch(**moved)

    def pin_memory(self) -> "Batch":
        """Called by DataLoader(pin_memory=True) on custom batch types."""
        pinned = {
            f.name: (v.pin_memory() if isinstance(v, torch.Tensor) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }
        return Batch(**pinned)
