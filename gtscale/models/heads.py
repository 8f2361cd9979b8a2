"""Task heads: small MLPs on one of a model's outputs, chosen by the task config.

- "graph": graph regression / classification with T outputs, from Outputs.graph (the EGT authors'
  PCQM4Mv2 head is this with two hidden layers of d_h; Graphormer's is a single linear layer, or
  with `form: graphormer` the fairseq code's LayerNorm(GELU(Linear d→d)) → Linear d→T without
  bias + one learned scalar bias);
- "node": per-node classes, from Outputs.node;
- "edge": per-pair classes, from Outputs.edge (EGT with output_edges);
- "distance": EGT's auxiliary objective, predicting each pair's hop count 0..ν from the output edge
  embeddings, scored by cross-entropy with weight κ. Pairs farther than ν hops apart, unreachable
  pairs and padding are not scored, as in the authors' code (which masks those targets out).

With `graph_features: G` a head also reads Batch.graph_feat [B, G], molecule-level features
(chemprop's extra features), concatenated to the output it reads: to the pooled graph
representation, or to every node / pair row for node and edge heads. `feature_dropout` gives that
block a dropout rate of its own in the first layer's input (a fingerprint of 2,048 bits beside a
representation of 128 values overfits a few hundred molecules at a rate that suits the other).

Heads return raw scores; losses other than the distance objective belong to the task.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.models.config import HeadConfig
from gtscale.models.layers import ACTIVATIONS, dropout
from gtscale.models.linear import Linear
from gtscale.models.outputs import Outputs


class MLP(nn.Module):
    """Linear layers with an activation between them (none after the last), dropout rate `p` on
    the input of each (chemprop's FFN); `input_p` on the first layer's input (default `p`)."""

    def __init__(self, widths: list[int], activation: str, p: float = 0.0, input_p: float | None = None):
        super().__init__()
        self.layers = nn.ModuleList(Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.act = ACTIVATIONS[activation]
        self.p = p
        self.input_p = p if input_p is None else input_p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](dropout(x, self.input_p, self.training))
        for layer in self.layers[1:]:
            x = layer(dropout(self.act(x), self.p, self.training))
        return x


class GraphormerOutput(nn.Module):
    """fairseq Graphormer's output layers: out(LN(act(transform(x)))) + bias, bias a scalar shared
    by every output (lm_head_transform_weight, layer_norm, embed_out, lm_output_learned_bias)."""

    def __init__(self, in_dim: int, out_dim: int, activation: str):
        super().__init__()
        self.transform = Linear(in_dim, in_dim)
        self.norm = nn.LayerNorm(in_dim)
        self.out = Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))
        self.act = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.act(self.transform(x)))) + self.bias


class Head(nn.Module):
    """An MLP reading Outputs.<kind>: graph [B, T], node [B, N, C], edge / distance [B, N, N, C]."""

    def __init__(self, cfg: HeadConfig, in_dim: int):
        super().__init__()
        self.cfg = cfg
        in_dim += cfg.graph_features
        out = cfg.max_hops + 1 if cfg.kind == "distance" else cfg.num_outputs
        if cfg.form == "graphormer":
            self.mlp = GraphormerOutput(in_dim, out, cfg.activation)
        else:
            # with feature_dropout, forward drops the first layer's input block by block instead
            split_input = cfg.graph_features and cfg.feature_dropout is not None
            self.mlp = MLP([in_dim, *cfg.hidden, out], cfg.activation, cfg.dropout, input_p=0.0 if split_input else None)

    def forward(self, outputs: Outputs, graph_feat: torch.Tensor | None = None) -> torch.Tensor:
        field = "edge" if self.cfg.kind == "distance" else self.cfg.kind
        x = getattr(outputs, field)
        if x is None:  # the sparse ET computes an EdgeBatch's targets alone, and no graph readout then
            raise ValueError(f"this {self.cfg.kind} head reads the model's {field} output, which it did not compute for this batch")
        if self.cfg.graph_features:
            if graph_feat is None or graph_feat.shape[-1] != self.cfg.graph_features:
                got = "none" if graph_feat is None else f"width {graph_feat.shape[-1]}"
                raise ValueError(f"this head reads graph_feat of width {self.cfg.graph_features}, the batch has {got}")
            feat = graph_feat.to(x.dtype).reshape(x.shape[0], *([1] * (x.dim() - 2)), -1)  # one row per graph → every node / pair
            if self.cfg.feature_dropout is not None:
                x = dropout(x, self.cfg.dropout, self.training)
                feat = dropout(feat, self.cfg.feature_dropout, self.training)
            x = torch.cat([x, feat.expand(*x.shape[:-1], -1)], dim=-1)
        return self.mlp(x)

    def distance_loss(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        """κ · mean cross-entropy of the predicted hop counts over the scored pairs."""
        if self.cfg.kind != "distance":
            raise ValueError(f"distance_loss belongs to the distance head, not a {self.cfg.kind} head")
        real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
        target = torch.where(real & (batch.spd <= self.cfg.max_hops), batch.spd, -100)
        loss = F.cross_entropy(scores.flatten(0, 2).float(), target.flatten(), ignore_index=-100)
        return self.cfg.weight * loss


def head_input_dim(cfg: HeadConfig, model: nn.Module) -> int:
    """Width of the model output the head reads; an error if the model has no such output."""
    dim = {"graph": model.graph_dim, "node": model.node_dim}.get(cfg.kind, model.edge_dim)
    if dim == 0:
        raise ValueError(f"a {cfg.kind} head needs edge outputs; this model has none (EGT: output_edges: true)")
    return dim
