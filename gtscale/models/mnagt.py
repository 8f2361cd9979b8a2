"""MNA-GT: Adaptive Multi-Neighbourhood Attention based Graph Transformer (Li et al., "Adaptive
Multi-Neighborhood Attention based Transformer for Graph Representation Learning"; no public code).

With Â the normalised adjacency with self-loops, D^-½(A+I)D^-½ (`sym`) or D^-1(A+I) (`rw`), a
layer on node states X:

    X_k = Âᵏ X,  k = 0..c                                                  multi-neighbourhood propagation
    z_vᵏ = O_k [ head_1 ‖ … ‖ head_m ],  head_i = softmax(X_k W_Qⁱᵏ (X_k W_Kⁱᵏ)ᵀ / √d_h) X W_Vⁱᵏ
                                                                          kernel k: (ÂᵏX, ÂᵏX, X)
    α_vᵏ = softmax_k( w · tanh(W z_vᵏ + b) ),  z_v = Σ_k α_vᵏ z_vᵏ          adaptive aggregation
    Z = LN(ÂX + z),  X' = LN(Z + W_2 GELU(W_1 Z))                           layer (first residual ÂX)

and a readout by mean, sum or a virtual node. Ablations of the aggregation (mean, sum, concat +
projection) are the `aggregation` switch. The paper's equation numbers are not reproduced here:
the paper was not at hand when this was written, so the names above stand in for them.

Sparse propagation: Âᵏ X is k products with Â held as edge weights on the edge list (sparse_ops.
edge_sum: E entries, never an N×N tensor, and no [E, d] gather kept for backward), so the model
takes an EdgeBatch of ego subgraphs of a huge graph as well as the dense Batch of molecules (whose
adjacency becomes an edge list inside; that conversion has data-dependent sizes, so a compiled
MNA-GT takes EdgeBatches, as the loader makes them). Attention itself is full within
each graph, as in the paper: it runs padded per graph, [B, heads, M, M], by torch's SDPA.

Interpretations, with reasons (no code to compare against):
- The virtual node of the `virtual` readout joins every kernel's attention (it attends and is
  attended) but no propagation: it has no edges, so ÂᵏX leaves it unchanged.
- Dropout after the attention output and the FFN, and on attention weights (paper: "dropout");
  the first two draw their masks by layers.keep_mask (drop rates exact to 2⁻¹⁷).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models.config import MNAGTConfig
from gtscale.models.embeddings import FeatureEmbedding, embed_edge_batch
from gtscale.models.layers import dropout, run_layer
from gtscale.models.linear import Linear
from gtscale.models.outputs import Outputs
from gtscale.models.sparse_ops import count_per_index, edge_layouts, edge_sum


class Propagation:
    """Â (with self-loops, normalised) as edge weights, and its padded attention layout: rows r
    of the packed states sit at (graph[r], slot[r]) of a [B, M] grid with mask `real`."""

    def __init__(self, src, dst, num_rows: int, num_nodes: int, normalization: str, graph, slot, num_graphs: int, size: int):
        """size: slots per graph in the padded layout (the largest graph, plus its virtual node)."""
        loop = torch.arange(num_nodes, device=src.device)
        self.src, self.dst = torch.cat([src, loop]), torch.cat([dst, loop])
        deg = count_per_index(self.dst, num_nodes)  # duplicate edges count (and sum) twice
        if normalization == "sym":
            inv_sqrt = deg.rsqrt()
            self.weight = inv_sqrt[self.src] * inv_sqrt[self.dst]
        else:
            self.weight = 1.0 / deg[self.dst]
        self.num_rows, self.num_nodes = num_rows, num_nodes
        self.layouts = edge_layouts(self.src, self.dst, num_nodes)  # the sparse kernels' CSR layouts (the product runs in fp32)
        self.graph, self.slot, self.num_graphs = graph, slot, num_graphs
        self.real = torch.zeros(num_graphs, max(size, 1), dtype=torch.bool, device=src.device)
        self.real[graph, slot] = True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Â x on the first num_nodes rows; rows past them (virtual nodes) unchanged. The product
        runs in fp32 whatever x's dtype (sums over many edges)."""
        with torch.autocast(x.device.type, enabled=False):  # autocast would cast the product to bf16
            out = edge_sum(self.weight[:, None], x[: self.num_nodes, None].float(), self.src, self.dst, self.num_nodes, self.layouts)
            out = out[:, 0].to(x.dtype)
        return torch.cat([out, x[self.num_nodes:]]) if self.num_rows > self.num_nodes else out

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(self.num_graphs, self.real.shape[1], *x.shape[1:])
        out[self.graph, self.slot] = x
        return out

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.graph, self.slot]


class MNAGTLayer(nn.Module):
    def __init__(self, cfg: MNAGTConfig):
        super().__init__()
        d, kernels = cfg.node_width, cfg.num_kernels
        self.cfg = cfg
        self.qk = nn.ModuleList(Linear(d, 2 * d) for _ in range(kernels))
        self.v = Linear(d, kernels * d)
        self.out = nn.ModuleList(Linear(d, d) for _ in range(kernels))
        if cfg.aggregation == "adaptive":
            self.score = Linear(d, d)
            self.score_vector = Linear(d, 1, bias=False)
        elif cfg.aggregation == "concat":
            self.merge = Linear(kernels * d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn1, self.ffn2 = Linear(d, cfg.ffn_dim), Linear(cfg.ffn_dim, d)

    def attend(self, xk: torch.Tensor, v: torch.Tensor, k: int, prop: Propagation) -> torch.Tensor:
        """Kernel k's output z^k [R, d] from queries/keys of xk = ÂᵏX and values v = X W_V^k."""
        heads = self.cfg.num_heads
        q, key = self.qk[k](xk).chunk(2, dim=-1)
        b, m = prop.real.shape
        q, key, v = (prop.pad(t).view(b, m, heads, -1).transpose(1, 2) for t in (q, key, v))
        p = self.cfg.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, key, v, attn_mask=prop.real[:, None, None, :], dropout_p=p)
        return self.out[k](prop.unpad(out.transpose(1, 2).reshape(b, m, -1)))

    def combine(self, z: list[torch.Tensor]) -> torch.Tensor:
        agg = self.cfg.aggregation
        if agg == "concat":
            return self.merge(torch.cat(z, dim=-1))
        stacked = torch.stack(z, dim=1)  # [R, c+1, d]
        if agg == "mean":
            return stacked.mean(1)
        if agg == "sum":
            return stacked.sum(1)
        alpha = torch.softmax(self.score_vector(torch.tanh(self.score(stacked))), dim=1)  # [R, c+1, 1]
        return (alpha * stacked).sum(1)

    def forward(self, x: torch.Tensor, prop: Propagation) -> torch.Tensor:
        values = self.v(x).chunk(self.cfg.num_kernels, dim=-1)
        xk, z, ax = x, [], None
        for k in range(self.cfg.num_kernels):
            if k > 0:
                xk = prop(xk)
                ax = xk if k == 1 else ax
            z.append(self.attend(xk, values[k], k, prop))
        if ax is None:
            ax = prop(x)
        h = self.ln1(ax + dropout(self.combine(z), self.cfg.dropout, self.training))
        ffn = self.ffn2(F.gelu(self.ffn1(h)))
        return self.ln2(h + dropout(ffn, self.cfg.dropout, self.training))


class MNAGT(nn.Module):
    """Batch or EdgeBatch → Outputs(node [B, N, d] (or [N_tot, d], [K, d] at an EdgeBatch's
    target_rows), edge None, graph [B, d])."""

    #: Takes an EdgeBatch (node-induced subgraphs, data.graph in a training config). Its attention is
    #: full within each graph, [M, M] per subgraph: keep such subgraphs small.
    takes_edge_batch = True

    def __init__(self, cfg: MNAGTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.node_width
        self.node_dim, self.edge_dim, self.graph_dim = d, 0, d
        self.node_embed = FeatureEmbedding(cfg.node_vocab, d) if cfg.node_vocab else None
        self.float_embed = Linear(cfg.node_float_dim, d) if cfg.node_float_dim else None
        self.virtual = nn.Parameter(torch.randn(d) / math.sqrt(d)) if cfg.readout == "virtual" else None
        self.layers = nn.ModuleList(MNAGTLayer(cfg) for _ in range(cfg.num_layers))

    @property
    def batch_fields(self) -> tuple[str, ...]:
        return ("node_feat", "node_mask", "edge_feat")

    def _embed(self, batch: EdgeBatch) -> torch.Tensor:
        return embed_edge_batch(self.node_embed, self.float_embed, batch, "MNA-GT")

    def _propagation(self, batch: EdgeBatch) -> Propagation:
        n, b = batch.num_nodes, batch.num_graphs
        graph = batch.graph_index
        counts = count_per_index(graph, b, torch.long)
        start = torch.cumsum(counts, 0) - counts
        shift = 1 if self.virtual is not None else 0
        slot = torch.arange(n, device=graph.device) - start[graph] + shift
        if shift:
            graph = torch.cat([graph, torch.arange(b, device=graph.device)])
            slot = torch.cat([slot, torch.zeros(b, dtype=slot.dtype, device=slot.device)])
        src, dst = batch.edge_index
        return Propagation(src, dst, n + shift * b, n, self.cfg.normalization, graph, slot, b, batch.max_graph_nodes + shift)

    def forward(self, batch: EdgeBatch | Batch) -> Outputs:
        dense_mask = None
        if isinstance(batch, Batch):
            dense_mask, batch = batch.node_mask, EdgeBatch.from_dense(batch)
        x = self._embed(batch)
        n, b = batch.num_nodes, batch.num_graphs
        if self.virtual is not None:
            x = torch.cat([x, self.virtual.to(x.dtype).expand(b, -1)])
        prop = self._propagation(batch)
        use_ckpt = self.cfg.activation_checkpointing and self.training
        for layer in self.layers:
            x = run_layer(layer, use_ckpt, x, prop)
        node = x[:n]
        if self.virtual is not None:
            graph = x[n:]
        else:
            graph = node.new_zeros(b, node.shape[-1]).index_add_(0, batch.graph_index, node)
            if self.cfg.readout == "mean":
                graph = graph / count_per_index(batch.graph_index, b, graph.dtype).clamp(min=1)[:, None]
        if batch.target_rows is not None:  # the targets' rows only (EdgeBatch's rule)
            node = node[batch.target_rows]
        if dense_mask is not None:
            node = batch.to_dense_nodes(node, dense_mask)
        return Outputs(node=node, edge=None, graph=graph)
