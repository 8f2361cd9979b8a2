"""Graphormer (Ying et al., NeurIPS'21): a Pre-LN transformer over the graph's nodes and a virtual
[VNode] token, steered by an attention bias built once per forward and reused by every layer.

    h⁰_i = x_i + z⁻(deg⁻ v_i) + z⁺(deg⁺ v_i)                       centrality encoding (eq. 5)
    A_ij = (h_i W_Q)(h_j W_K)ᵀ / √d + b_φ(i,j) + c_ij                spatial + edge encoding (eq. 6-7)
    c_ij = 1/N Σ_n x_(e_n) · w^E_n   over the first `multi_hop_max_dist` edges of a shortest path
    h' = h + MHA(LN(h)),  h = h' + FFN(LN(h'))                       Pre-LN layers (eq. 8-9)

The graph output is the [VNode] token, whose distance to every node is its own learned bias t.

Two layouts, by config switches. The default is the paper's and the v1.0 code's: Pre-LN layers
and a LayerNorm on the output. The current microsoft/Graphormer (fairseq) code, which trained the
released PCQM4Mv2 checkpoints, differs: `embedding_ln` (LayerNorm on h⁰ before the first layer),
`post_ln` (h' = LN(h + MHA(h)), h = LN(h' + FFN(h'))) and no final LayerNorm (`final_ln: false`).
Departures from the authors' code: padding keys, and with `spatial_pos_max` the pairs their
collator keeps from attending to each other, get MASK_VALUE instead of -inf. In training, dropout
masks are drawn by layers.keep_mask (drop rates exact to 2⁻¹⁷, not to float precision).
Tables and vocabularies follow microsoft/Graphormer (graphormer_layers.py), so that
graphormer-base with PCQM4Mv2's vocabularies has its published 47.1M parameters.

Index conventions of the Batch (schema.py) mapped onto Graphormer's tables, here and only here:
- degree d → row d+1 of the degree tables (capped at the last row); row 0 is padding;
- hop count s → row s+1 of the spatial table (capped at num_spatial-2); SPD_UNREACHABLE → the last
  row, num_spatial-1, so unreachable pairs have a bucket of their own;
- path edge features → rows of the flat edge table by embeddings.FeatureEmbedding's offsets;
- spatial_pos_max compares hop counts as the authors' collator does, before the +1 of the spatial
  row, an unreachable pair counting as UNREACHABLE_HOPS (their Floyd–Warshall's value for it).

Departure (gtscale's addition for graphs that are not molecules): with node_float_dim > 0, x_i is
a linear map of the continuous node features (Batch.node_feat_float) instead of the atom table.

Attention (eq. 6-7) is `biased_attention` below, in plain torch; where the `sdpa` kernel is enabled
and applies, torch's fused scaled_dot_product_attention computes it instead (kernels/sdpa.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.format.schema import SPD_UNREACHABLE
from gtscale.models.config import GraphormerConfig
from gtscale.models.embeddings import MASK_VALUE, FeatureEmbedding, embed_nodes, lookup, node_embedding
from gtscale.models.kernels import sdpa, use_kernel
from gtscale.models.layers import FeedForward, compute_dtype, dropout, keep_mask, run_layer
from gtscale.models.linear import Linear
from gtscale.models.outputs import Outputs
from gtscale.models.packing import Packing

#: Attention biases are allocated with the key dimension padded to this many elements, so that the
#: fused memory-efficient SDPA kernel on GPU can read the bias in place instead of padding a copy
#: in every layer.
_BIAS_ALIGN = 16


def biased_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                     keep: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q kᵀ / √d + bias) v (eq. 6-7, the bias b_φ(i,j) + c_ij), with dropout on the map: the
    reference form. q, k, v [B, heads, M, d]; bias [B, heads, M, M], finite (MASK_VALUE where
    masked), so no row is all -inf; dropout's keep mask and scale, or None and 1."""
    attn = torch.softmax(torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2)) + bias, dim=-1)
    if keep is None:
        return torch.matmul(attn, v)
    return torch.matmul(attn * keep, v * scale)  # the scale on v, the smaller tensor when d < M


class GraphormerLayer(nn.Module):
    """MHA with an additive bias, then a GELU FFN, on packed tokens x [T, d]; Pre-LN, or
    Post-LN with `post_ln` (self.ln and self.ffn.ln then normalise after each residual sum)."""

    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.post_ln = cfg.post_ln
        self.attention_dropout = cfg.attention_dropout
        self.ln = nn.LayerNorm(cfg.node_width)
        self.qkv = Linear(cfg.node_width, 3 * cfg.node_width)
        self.out = Linear(cfg.node_width, cfg.node_width)
        self.dropout = cfg.dropout
        self.ffn = FeedForward(cfg.node_width, cfg.ffn_dim, "gelu", cfg.dropout, cfg.activation_dropout)

    def forward(self, x: torch.Tensor, packing: Packing, bias: torch.Tensor) -> torch.Tensor:
        if self.post_ln:
            x = self.ln(x + self.attend(x, packing, bias))
            return self.ffn.ln(x + self.ffn.branch(x))
        x = x + self.attend(self.ln(x), packing, bias)
        return x + self.ffn(x)

    def attend(self, x: torch.Tensor, packing: Packing, bias: torch.Tensor) -> torch.Tensor:
        """The attention branch (output projection and dropout included) of packed tokens x."""
        b, m, heads = packing.num_graphs, packing.size, self.num_heads
        qkv = packing.unpack_tokens(self.qkv(x))
        q, k, v = qkv.view(b, m, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        p_drop = self.attention_dropout if self.training else 0.0
        if use_kernel("sdpa") and sdpa.applies(q, p_drop):
            out = sdpa.attention(q, k, v, bias, p_drop)
        else:
            keep, scale = keep_mask((b, heads, m, m), p_drop, q.device) if p_drop > 0 else (None, 1.0)
            out = biased_attention(q, k, v, bias, keep, scale)
        out = packing.pack_tokens(out.transpose(1, 2).reshape(b, m, -1))
        return dropout(self.out(out), self.dropout, self.training)


class PathEncoding(nn.Module):
    """Edge encoding c_ij: the mean over the path's first D edges of each edge's features,
    embedded per head, each hop n mapped by its own [heads × heads] matrix w^E_n.

    (Σ_f table[x_f] / F) · W_n = Σ_f (table · W_n)[x_f] / F, so one small projected table per hop
    and one embedding_bag give c_ij without materialising the [B, N, N, D, F, heads] gather."""

    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.max_dist = cfg.multi_hop_max_dist
        self.edges = FeatureEmbedding(cfg.edge_vocab, cfg.num_heads)
        self.hop_weight = nn.Parameter(torch.empty(cfg.num_edge_dis, cfg.num_heads, cfg.num_heads))

    def forward(self, path_edges: torch.Tensor, spd: torch.Tensor) -> torch.Tensor:
        """path_edges long [B, N, N, D, F], spd long [B, N, N] → float [B, N, N, heads]."""
        hops = min(self.max_dist, path_edges.shape[3])
        rows = self.edges.rows(path_edges[:, :, :, :hops])  # [B, N, N, hops, F], 0 = padding
        num_rows = self.edges.table.num_embeddings
        hop_offset = torch.arange(hops, device=rows.device).view(1, 1, 1, hops, 1) * num_rows
        flat = torch.where(rows > 0, rows + hop_offset, 0).flatten(3).flatten(0, 2)
        tables = torch.matmul(self.edges.table.weight, self.hop_weight[:hops])  # [hops, rows, heads]
        summed = F.embedding_bag(flat, tables.flatten(0, 1), mode="sum", padding_idx=0)
        # Graphormer divides by the path length capped at D (1 on the diagonal); paths longer
        # than D and unreachable pairs are averaged over D.
        length = spd.clamp(1, self.max_dist).to(summed.dtype)
        return summed.view(*spd.shape, -1) / (length.unsqueeze(-1) * len(self.edges.vocab))


#: The hop count microsoft/Graphormer's Floyd–Warshall (algos.pyx) gives an unreachable pair.
UNREACHABLE_HOPS = 510


class Graphormer(nn.Module):
    """Batch → Outputs(node [B, N, d], edge None, graph [B, d] = the [VNode] token)."""

    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.cfg = cfg
        d, heads = cfg.node_width, cfg.num_heads
        self.node_dim, self.edge_dim, self.graph_dim = d, 0, d

        self.atom_embed = node_embedding(cfg.node_vocab, cfg.node_float_dim, d)
        self.in_degree = nn.Embedding(cfg.num_in_degree, d, padding_idx=0)
        self.out_degree = nn.Embedding(cfg.num_out_degree, d, padding_idx=0)
        self.graph_token = nn.Parameter(torch.empty(1, d))
        self.spatial = nn.Embedding(cfg.num_spatial, heads, padding_idx=0)
        self.path_encoding = PathEncoding(cfg)
        self.virtual_distance = nn.Parameter(torch.empty(1, heads))  # t: [VNode] ↔ every node
        self.embedding_ln = nn.LayerNorm(d) if cfg.embedding_ln else None
        self.layers = nn.ModuleList(GraphormerLayer(cfg) for _ in range(cfg.num_layers))
        self.final_ln = nn.LayerNorm(d) if cfg.final_ln else None
        self.reset_parameters()

    @property
    def batch_fields(self) -> tuple[str, ...]:
        """Batch fields this model reads; path_edges needs at least `multi_hop_max_dist` hops."""
        node = "node_feat_float" if self.cfg.node_float_dim else "node_feat"
        return (node, "node_mask", "edge_feat", "spd", "in_degree", "out_degree", "path_edges")

    def reset_parameters(self) -> None:
        """Graphormer's initialisation: N(0, 0.02) weights, zero biases, zero padding rows."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        for param in (self.graph_token, self.virtual_distance, self.path_encoding.hop_weight):
            nn.init.normal_(param, std=0.02)

    def _degree_rows(self, degree: torch.Tensor, mask: torch.Tensor, rows: int) -> torch.Tensor:
        return torch.where(mask, (degree + 1).clamp(max=rows - 1), 0)

    def _nodes(self, batch: Batch) -> torch.Tensor:
        """Centrality-encoded node embeddings with the [VNode] first: [B, N+1, d]."""
        mask = batch.node_mask
        x = (
            embed_nodes(self.atom_embed, batch)
            + lookup(self.in_degree, self._degree_rows(batch.in_degree, mask, self.cfg.num_in_degree))
            + lookup(self.out_degree, self._degree_rows(batch.out_degree, mask, self.cfg.num_out_degree))
        )
        return torch.cat([self.graph_token.expand(batch.num_graphs, 1, -1), x], dim=1)

    def attention_bias(self, batch: Batch, dtype: torch.dtype) -> torch.Tensor:
        """[B, heads, N+1, N+1] in the logits' dtype: spatial + edge encoding between nodes, t
        between the [VNode] and everything, MASK_VALUE on padding keys (and on pairs at least
        spatial_pos_max hops apart)."""
        spd = batch.spd
        cfg = self.cfg
        buckets = torch.where(spd == SPD_UNREACHABLE, cfg.num_spatial - 1, (spd + 1).clamp(max=cfg.num_spatial - 2))
        pair = lookup(self.spatial, buckets) + self.path_encoding(batch.path_edges, spd)  # [B, N, N, heads]
        b, n = batch.num_graphs, batch.max_graph_nodes
        m = n + 1
        aligned = -(-m // _BIAS_ALIGN) * _BIAS_ALIGN
        bias = torch.zeros(b, cfg.num_heads, m, aligned, dtype=dtype, device=spd.device)[..., :m]
        bias[:, :, 1:, 1:] = pair.permute(0, 3, 1, 2)
        t = self.virtual_distance.view(1, -1, 1)
        bias[:, :, 0, :] = t
        bias[:, :, 1:, 0] = t
        if cfg.spatial_pos_max is not None:
            far = torch.where(spd == SPD_UNREACHABLE, UNREACHABLE_HOPS, spd.long()) >= cfg.spatial_pos_max
            bias[:, :, 1:, 1:].masked_fill_(far[:, None], MASK_VALUE)
        real_key = F.pad(batch.node_mask, (1, 0), value=True)
        return bias.masked_fill_(~real_key[:, None, None, :], MASK_VALUE)

    def forward(self, batch: Batch) -> Outputs:
        for name in ("spd", "in_degree", "out_degree", "path_edges"):
            if getattr(batch, name) is None:
                raise ValueError(f"Graphormer needs batch.{name}")
        x = self._nodes(batch)
        packing = Packing.for_batch(batch, num_virtual=1, pairs=False)  # the [VNode] first
        bias = self.attention_bias(batch, compute_dtype(x))
        x = packing.pack_tokens(x)
        if self.embedding_ln is not None:
            x = self.embedding_ln(x)
        x = dropout(x, self.cfg.dropout, self.training)
        for layer in self.layers:
            x = run_layer(layer, self.cfg.activation_checkpointing and self.training, x, packing, bias)
        if self.final_ln is not None:
            x = self.final_ln(x)
        x = packing.unpack_tokens(x)
        return Outputs(node=x[:, 1:], edge=None, graph=x[:, 0])
