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

Only the targets are read. Given an EdgeBatch with target_rows, the model returns the targets' node
rows, and its last steps run only where they still reach a target (`step_graphs`): step T at the
targets alone, step T − 1 at the nodes step T reads (within two hops of a target: a node's update
reads its neighbours as keys and, as a key itself, their softmaxes over their own neighbours), and
so on while that is fewer than all nodes. On fan-out neighbourhoods [15, 10] with one step this
computes 1 update of 166 and scores the edges into a target or its 15 neighbours, 196 of 496
(TargetedEdgeGraph); the targets' outputs and gradients are the whole forward's
(tests/models/test_et.py).

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
from gtscale.models.sparse_ops import EdgeLayouts, count_per_index, edge_dot, edge_layouts, edge_sum, segment_softmax


class EdgeGraph:
    """Attention of eq. 3 along edges src → dst over N tokens [N, ...], updating every token."""

    rows = None  # every token is updated

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, dtype: torch.dtype = torch.float32):
        self.src, self.dst, self.num_nodes, self.dtype = src, dst, num_nodes, dtype
        self._layouts: EdgeLayouts | None = None
        self._layouts_built = False

    @property
    def layouts(self) -> EdgeLayouts | None:
        """The sparse kernels' CSR layouts, built once per forward, on first use (a forward whose
        steps are all TargetedEdgeGraphs never needs the whole graph's). Not a cached_property,
        whose lock torch.compile cannot trace."""
        if not self._layouts_built:
            self._layouts, self._layouts_built = edge_layouts(self.src, self.dst, self.num_nodes, self.dtype), True
        return self._layouts

    def mask_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
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


class TargetedEdgeGraph:
    """One step's attention along an EdgeGraph's edges, computed only for the tokens at `rows`
    (distinct node ids, sorted): the step's outputs are [R, ...], in the order of rows.

    The update of a row A reads, as a query, its in-edges B → A, and as a key, each out-edge A → C
    weighted by C's softmax, which spans C's own in-edges. So the step needs the softmaxes of the
    rows and of their out-neighbours (the queried tokens) over all of their in-edges (the scored
    edges), and the states of `reads`: the rows and both ends of the scored edges (all within two
    hops of a row). It works in the space of g (ETBlock.pairs): the logit of a scored edge B → C is
    β g_Cᵀ M_h g_B, so only the tokens `near` the rows (the queried ones and the rows' in-neighbours)
    are multiplied by a weight; every other token's g is read by the sparse kernels alone."""

    def __init__(self, graph: EdgeGraph, rows: torch.Tensor):
        n, device = graph.num_nodes, rows.device
        self.rows = rows
        is_row = torch.zeros(n, dtype=torch.bool, device=device)
        is_row[rows] = True
        is_near = is_row.clone()
        is_near[graph.dst[is_row[graph.src]]] = True  # the queried tokens
        scored = torch.nonzero(is_near[graph.dst]).squeeze(1)
        src, dst = graph.src[scored], graph.dst[scored]
        into_row = torch.nonzero(is_row[dst]).squeeze(1)  # scored edges B → A, A a row: A reads B
        from_row = torch.nonzero(is_row[src]).squeeze(1)  # scored edges A → C, A a row: C reads A
        is_near[src[into_row]] = True
        reads = is_near.clone()
        reads[src] = True
        self.reads = torch.nonzero(reads).squeeze(1)
        self.near = torch.nonzero(is_near).squeeze(1)
        near, count = self.near.shape[0], rows.shape[0]
        in_near = torch.full((n,), -1, dtype=torch.long, device=device)
        in_near[self.near] = torch.arange(near, device=device)
        in_rows = torch.full((n,), -1, dtype=torch.long, device=device)
        in_rows[rows] = torch.arange(count, device=device)
        self.row_in_near = in_near[rows]
        self.src, self.dst = src, in_near[dst]  # the scored edges: keys among all tokens, queries among the near ones
        self.layouts = edge_layouts(src, self.dst, n, graph.dtype, num_dst=near)
        self.into_row, self.query_src, self.query_row = into_row, in_near[src[into_row]], in_rows[dst[into_row]]
        self.from_row, self.key_dst, self.key_row = from_row, self.dst[from_row], in_rows[src[from_row]]
        self.query_layouts = edge_layouts(self.query_src, self.query_row, near, graph.dtype, num_dst=count)
        self.key_layouts = edge_layouts(self.key_dst, self.key_row, near, graph.dtype, num_dst=count)

    def mask_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.rows]

    def attention_of_g(self, g: torch.Tensor, pairs: torch.Tensor, beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """g [N, D], M_h [H, D, D] (ETBlock.pairs) → (Σ_B p_AB g_B [R, H, D], Σ_C p_CA g_C [R, H, D],
        g_A [R, D]) at the rows A."""
        g_near = g[self.near]
        u = torch.einsum("ni,hij->nhj", g_near, pairs) * beta  # [near, H, D]: u_C · g_B is the logit of B → C
        p = segment_softmax(edge_dot(u, g, self.src, self.dst, self.layouts), self.dst, g_near.shape[0])[0]
        count = self.rows.shape[0]
        read = edge_sum(p[self.into_row], g_near, self.query_src, self.query_row, count, self.query_layouts)
        collected = edge_sum(p[self.from_row], g_near, self.key_dst, self.key_row, count, self.key_layouts)
        return read, collected, g_near[self.row_in_near]


class SparseET(nn.Module):
    """EdgeBatch (or Batch) → Outputs(node [N_tot, 2D] (or [B, N, 2D], [K, 2D] at an EdgeBatch's
    target_rows), edge None, graph [B, 2D], or None where only the targets' last states were
    computed)."""

    #: Takes an EdgeBatch (node-induced subgraphs of a huge graph, data.graph in a training config).
    takes_edge_batch = True

    def __init__(self, cfg: ETConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.node_width
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

    def embed(self, batch: EdgeBatch, rows: torch.Tensor | None = None) -> torch.Tensor:
        """x⁰ of every node, or of the nodes at `rows` only."""
        return embed_edge_batch(self.node_embed, self.float_embed, batch, "ET", rows)

    def structure(self, batch: EdgeBatch) -> EdgeGraph:
        src, dst = batch.edge_index
        if self.cfg.self_loops:
            loop = torch.arange(batch.num_nodes, device=src.device)
            src, dst = torch.cat([src, loop]), torch.cat([dst, loop])
        return EdgeGraph(src, dst, batch.num_nodes, next(self.block.parameters()).dtype)

    def step_graphs(self, graph: EdgeGraph, targets: torch.Tensor | None) -> list[EdgeGraph | TargetedEdgeGraph]:
        """The graph of each of the T steps: the whole graph, or where only the `targets` are read
        (an EdgeBatch's target_rows), TargetedEdgeGraphs for the last steps: step T updates the
        targets, and each step before it the nodes whose states the next one reads (within 2 hops
        of them), as long as these are fewer than all. Compiled models take the whole graph (the
        restriction's node sets have data-dependent sizes)."""
        steps: list[EdgeGraph | TargetedEdgeGraph] = [graph] * self.cfg.num_steps
        if targets is None or torch.compiler.is_compiling():
            return steps
        needed = torch.unique(targets)
        for t in reversed(range(len(steps))):
            if needed.shape[0] == graph.num_nodes:
                break
            steps[t] = TargetedEdgeGraph(graph, needed)
            needed = steps[t].reads
        return steps

    def forward(self, batch: EdgeBatch | Batch) -> Outputs:
        dense_mask = None
        if isinstance(batch, Batch):
            dense_mask, batch = batch.node_mask, EdgeBatch.from_dense(batch)
        x0 = x = self.embed(batch)
        steps = self.step_graphs(self.structure(batch), batch.target_rows)
        use_ckpt = self.cfg.activation_checkpointing and self.training
        for t, step in enumerate(steps):
            new = run_layer(self.block, use_ckpt, x, step)
            # a restricted step's rows go back into the node states; the others are read no more
            x = new if step.rows is None or t == len(steps) - 1 else x.index_copy(0, step.rows, new)
        rows = steps[-1].rows  # the nodes whose last states were computed (None: all)
        # x⁰ at the rows embedded again (a few rows), not gathered from x⁰: a gather's gradient is a
        # zero-filled [N, D] tensor added into x⁰'s, three passes over every node's row
        node = torch.cat([self.block.norm(x0 if rows is None else self.embed(batch, rows)), self.block.norm(x)], dim=-1)
        pooled = None
        if rows is None:
            counts = count_per_index(batch.graph_index, batch.num_graphs, node.dtype).clamp(min=1)
            pooled = node.new_zeros(batch.num_graphs, node.shape[-1]).index_add_(0, batch.graph_index, node) / counts[:, None]
        if batch.target_rows is not None:  # the targets' rows only (EdgeBatch's rule)
            node = node[batch.target_rows if rows is None else torch.searchsorted(rows, batch.target_rows)]
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
