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
    token_index: Optional[torch.Tensor] = None  # long [T']: b·N + i of the real nodes, row-major; then B·N ("trash") up to T' (packing.py)
    pair_index: Optional[torch.Tensor] = None  # long [P']: (b·N + i)·N + j of the real node pairs; then B·N² up to P'

    def __post_init__(self):
        # A Batch built without them (by hand, in tests) gets exact ones; the loader ships them.
        if self.token_index is None:
            self.token_index, self.pair_index = packing_indices(self.node_mask)

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


def packing_indices(node_mask: torch.Tensor, align: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_index, pair_index) of a [B, N] node mask, each list's length rounded up to a
    multiple of `align` with trash entries (B·N, B·N²), so that batches of one padded shape
    share a few index lengths (a compiled model then sees a few shapes, not one per batch).
    Computed where the batch is made (the loader's workers): models never look for real rows."""
    b, n = node_mask.shape
    mask = node_mask.cpu()
    tokens = mask.reshape(-1).nonzero().squeeze(1)
    pairs = (mask[:, :, None] & mask[:, None, :]).reshape(-1).nonzero().squeeze(1)
    return _round_up(tokens, align, b * n).to(node_mask.device), _round_up(pairs, align, b * n * n).to(node_mask.device)


def _round_up(index: torch.Tensor, align: int, trash: int) -> torch.Tensor:
    extra = -index.numel() % align
    return torch.cat([index, index.new_full((extra,), trash)]) if extra else index
