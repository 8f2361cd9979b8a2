"""Sparse Energy Transformer for node anomaly detection (Hoover et al., NeurIPS'23, App. C).

Attention runs along the edges of an edge list only: for edges B → C (C reads B) the logits of
eq. 3 are one score per edge and head, the softmax is a segment softmax over each C's incoming
edges, and both terms of the closed-form update are edge sums (sparse_ops.py). Memory is
O(N·D + E·H): no N×N tensor and no [E, H, Y] tensor is kept, so a sampled subgraph of 10⁵ nodes
and 10⁶ edges fits. Â = 1 (App. C has no learned adjacency). The node representation is
g^{t=1} ‖ g^{t=T} (the first step's normalised tokens and the last), scored by an MLP + sigmoid
(a node head), trained with the weighted BCE of `anomaly_loss`, ω = #normal / #anomalous.

Departures from the authors' code (zhuergou/Energy-Transformer-for-Graph-Anomaly-Detection;
besides those of energy.py), with reasons:
- g^{t=1} is the energy LayerNorm of the input tokens. On whole graphs
  (main_without_subsample.py) the authors concatenate the raw input embedding instead, and on
  sampled subgraphs (main_subsample.py) they concatenate nothing: the MLP reads h^T alone. The
  paper writes g^{t=1} ‖ g^{t=T}, so we use that.
- Self-loops: the authors add them everywhere they train (dataset.py for the homogeneous Yelp and
  Amazon graphs, main_subsample.py on every sampled T-Finance / T-Social subgraph); here they are
  the `self_loops` switch, on in configs/models/et-*.yaml. Without them a node without incoming
  edges contributes no attention energy and moves by its Hopfield term only.
- Their dropout (0.3 by default) on the Hopfield hidden layer is not modelled: with it the update
  is no longer the gradient of one energy.
- Their classifier is one Linear to 2 classes under a weighted softmax cross-entropy; App. C's
  MLP + sigmoid with weighted BCE (`anomaly_loss`) is the same model for two classes.
- The readout for a whole graph (Outputs.graph) is the mean of its nodes' representations; App. C
  scores nodes only.

Input: an EdgeBatch, or a dense Batch (converted with EdgeBatch.from_dense; outputs then come back
in the Batch's padded layout, so the model also trains on the molecular tasks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models.config import ETConfig
from gtscale.models.embeddings import FeatureEmbedding, embed_edge_batch
from gtscale.models.et.energy import ETBlock
from gtscale.models.et.layerwise import LayerwiseET
from gtscale.models.layers import run_layer
from gtscale.models.linear import Linear
from gtscale.models.outputs import Outputs
from gtscale.models.sparse_ops import count_per_index, edge_dot, edge_layouts, edge_sum, segment_softmax


class EdgeGraph:
    """Attention of eq. 3 along edges src → dst over N tokens [N, ...]."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, dtype: torch.dtype = torch.float32):
        self.src, self.dst, self.num_nodes = src, dst, num_nodes
        self.layouts = edge_layouts(src, dst, num_nodes, dtype)  # the sparse kernels' CSR layouts, once per forward

    def mask_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def attention(self, q: torch.Tensor, k: torch.Tensor, beta: torch.Tensor, energy: bool):
        """(Σ_B p K_B [N, H, Y], Σ_C p Q_C [N, H, Y], E^ATT or None)."""
        layouts = self.layouts
        scores = edge_dot(q, k, self.src, self.dst, layouts).float() * beta.float()  # [E, H]
        p, lse, has_edges = segment_softmax(scores, self.dst, self.num_nodes)
        t_query = edge_sum(p, k, self.src, self.dst, self.num_nodes, layouts)  # C as the query reads its keys B
        t_key = edge_sum(p, q, self.dst, self.src, self.num_nodes, layouts and layouts.transposed())  # B as a key collects from its queries C
        e_att = -lse.sum() / beta.float() if energy else None
        return t_query, t_key, e_att


class SparseET(nn.Module):
    """EdgeBatch (or Batch) → Outputs(node [N_tot, 2D] (or [B, N, 2D]), edge None, graph [B, 2D])."""

    #: Takes an EdgeBatch (node-induced subgraphs of a huge graph, data.graph in a training config).
    takes_edge_batch = True

    def __init__(self, cfg: ETConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.width
        self.node_dim, self.edge_dim, self.graph_dim = 2 * d, 0, 2 * d
        self.node_embed = FeatureEmbedding(cfg.node_vocab, d) if cfg.node_vocab else None
        self.float_embed = Linear(cfg.node_float_dim, d) if cfg.node_float_dim else None
        self.block = ETBlock(d, cfg.num_heads, cfg.head_dim, cfg.num_memories, cfg.step_size, cfg.noise_std)

    @property
    def layers(self) -> list[nn.Module]:
        """The one block all T steps share (model-info lists layers)."""
        return [self.block]

    @property
    def batch_fields(self) -> tuple[str, ...]:
        return ("node_feat", "node_mask", "edge_feat")

    def embed(self, batch: EdgeBatch) -> torch.Tensor:
        return embed_edge_batch(self.node_embed, self.float_embed, batch, "ET")

    def structure(self, batch: EdgeBatch) -> EdgeGraph:
        src, dst = batch.edge_index
        if self.cfg.self_loops:
            loop = torch.arange(batch.num_nodes, device=src.device)
            src, dst = torch.cat([src, loop]), torch.cat([dst, loop])
        return EdgeGraph(src, dst, batch.num_nodes, next(self.block.parameters()).dtype)

    def forward(self, batch: EdgeBatch | Batch) -> Outputs:
        dense_mask = None
        if isinstance(batch, Batch):
            dense_mask, batch = batch.node_mask, EdgeBatch.from_dense(batch)
        x = self.embed(batch)
        graph = self.structure(batch)
        first = self.block.norm(x)
        use_ckpt = self.cfg.activation_checkpointing and self.training
        for _ in range(self.cfg.num_steps):
            x = run_layer(self.block, use_ckpt, x, graph)
        node = torch.cat([first, self.block.norm(x)], dim=-1)
        counts = count_per_index(batch.graph_index, batch.num_graphs, node.dtype).clamp(min=1)
        pooled = node.new_zeros(batch.num_graphs, node.shape[-1]).index_add_(0, batch.graph_index, node)
        pooled = pooled / counts[:, None]
        if dense_mask is not None:
            node = batch.to_dense_nodes(node, dense_mask)
        return Outputs(node=node, edge=None, graph=pooled)

    def layerwise(self) -> LayerwiseET:
        """This model's forward as steps over chunks of nodes (full-neighbourhood inference)."""
        return LayerwiseET(self)

    @torch.no_grad()
    def energies(self, batch: EdgeBatch) -> list[float]:
        """E at x⁰ and after each of the T steps."""
        x = self.embed(batch)
        graph = self.structure(batch)
        out = [float(self.block.energy(x, graph))]
        for _ in range(self.cfg.num_steps):
            x = self.block(x, graph)
            out.append(float(self.block.energy(x, graph)))
        return out


def anomaly_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """App. C's weighted BCE on logits [K] with 0/1 labels [K]: anomalies weighted by
    ω = #normal / #anomalous of these labels (1 when there are none)."""
    labels = labels.float()
    positives = labels.sum()
    omega = torch.where(positives > 0, (labels.numel() - positives) / positives.clamp(min=1), torch.ones_like(positives))
    return F.binary_cross_entropy_with_logits(scores.float(), labels, pos_weight=omega)
