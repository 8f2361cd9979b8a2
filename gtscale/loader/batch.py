"""`Batch`: what models see. Dense, padded to the largest graph of the batch.

Shapes use B graphs and N = the largest node count in the batch, T = the most target nodes of a
graph (node tasks on sampled subgraphs; 1 for ego subgraphs). Categorical features are
shifted by `schema.FEATURE_SHIFT` so that 0 means padding / no edge (see schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import torch

from gtscale.format.schema import SPD_UNREACHABLE

#: Index of filler graphs (padding graphs, and what a rank out of evaluation data feeds the model);
#: no dataset has a negative idx.
FILLER_IDX = -1

#: How each field's leading dimensions are laid out: 1 = [B, …], 2 = [B, N, …], 3 = [B, N, N, …].
_LAYOUT = {
    "node_feat": 2, "node_mask": 2, "edge_feat": 3, "spd": 3, "in_degree": 2, "out_degree": 2, "svd_pe": 2, "lap_pe": 2,
    "lap_eigval": 1, "path_edges": 3, "y": 1, "y_mask": 1, "node_y": 2, "node_y_mask": 2, "idx": 1, "node_feat_float": 2,
    "target_pos": 1, "target_id": 1, "target_y": 1, "target_y_mask": 1, "graph_feat": 1,
}
#: Padding values other than 0 / False.
_FILL = {"spd": SPD_UNREACHABLE, "idx": FILLER_IDX, "target_id": FILLER_IDX}


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
    target_pos: Optional[torch.Tensor] = None  # long [B, T]; position of each target node in its graph (0 on padding)
    target_id: Optional[torch.Tensor] = None  # long [B, T]; its global node id, −1 (FILLER_IDX) on padding and filler graphs
    target_y: Optional[torch.Tensor] = None  # float [B, T]; its label, 0 where target_y_mask is False
    target_y_mask: Optional[torch.Tensor] = None  # bool [B, T]; True where labelled
    graph_feat: Optional[torch.Tensor] = None  # float [B, G]; molecule-level input features (`gtscale shard --graph-features`)
    token_index: Optional[torch.Tensor] = None  # long [T']: b·N + i of the real nodes, row-major; then B·N ("trash") up to T' (packing.py)
    pair_index: Optional[torch.Tensor] = None  # long [P']: (b·N + i)·N + j of the real node pairs; then B·N² up to P'

    def __post_init__(self):
        # A Batch built without them (by hand, in tests) gets exact ones; the loader ships them.
        if self.token_index is None:
            self.token_index, self.pair_index = packing_indices(self.node_mask)

    def padded(self, num_graphs: int, num_nodes: int) -> "Batch":
        """This batch padded to `num_graphs` graphs (filler graphs: no node, no label, idx
        FILLER_IDX) of `num_nodes` node slots, with index lists of full length (B·N, B·N²): a
        batch of exactly that shape whatever its graphs (loader.pad_to_bucket)."""
        b, n = self.node_mask.shape
        if num_graphs < b or num_nodes < n:
            raise ValueError(f"cannot pad a batch of {b} graphs × {n} nodes to {num_graphs} × {num_nodes}")
        out = {}
        for name, dims in _LAYOUT.items():
            t = getattr(self, name)
            if t is None:
                continue
            widths = [0, 0] * (t.dim() - dims) + [0, num_nodes - n] * (dims - 1) + [0, num_graphs - b]
            out[name] = torch.nn.functional.pad(t, widths, value=_FILL.get(name, 0))
        tokens, pairs = packing_indices(out["node_mask"], full=True)
        return Batch(**out, token_index=tokens, pair_index=pairs)

    @property
    def num_graphs(self) -> int:
        return self.node_mask.shape[0]

    @property
    def max_graph_nodes(self) -> int:
        """N, the node slots of each graph: the largest graph's nodes, or more in a padded batch
        (EdgeBatch.max_graph_nodes is the same count for edge lists)."""
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


def packing_indices(node_mask: torch.Tensor, full: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_index, pair_index) of a [B, N] node mask, each list filled with trash entries up to
    `rounded_length` of its real rows, or with `full` up to its longest possible length (B·N, B·N²),
    so that every batch of one padded shape has index lists of one length too. Computed where the
    batch is made (the loader's workers): models never look for real rows."""
    b, n = node_mask.shape
    mask = node_mask.cpu()
    tokens = mask.reshape(-1).nonzero().squeeze(1)
    pairs = (mask[:, :, None] & mask[:, None, :]).reshape(-1).nonzero().squeeze(1)
    token_length = b * n if full else min(rounded_length(tokens.numel()), b * n)
    pair_length = b * n * n if full else min(rounded_length(pairs.numel()), b * n * n)
    tokens, pairs = fill_index(tokens, token_length, b * n), fill_index(pairs, pair_length, b * n * n)
    return tokens.to(node_mask.device), pairs.to(node_mask.device)


def rounded_length(rows: int) -> int:
    """`rows` rounded up to one of 16 lengths per octave (exact below 32): at most 1/16 more.

    Packed per-token and per-pair layers then see a few dozen row counts in a whole run instead of
    a new one in nearly every batch. A new shape costs more than its rows: oneDNN builds a kernel
    for each product shape it has not seen (~0.7 ms against ~0.1 ms for the product itself at
    500 × 64 × 192, models/linear.py), and a compiled model without pad_to_bucket specialises on
    shapes too."""
    if rows < 32:
        return rows
    quantum = 1 << (rows.bit_length() - 5)
    return -(-rows // quantum) * quantum


def fill_index(index: torch.Tensor, length: int, trash: int) -> torch.Tensor:
    """`index` followed by `trash` entries up to `length` entries."""
    return torch.cat([index, index.new_full((length - index.numel(),), trash)])
