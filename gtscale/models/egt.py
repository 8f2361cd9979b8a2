"""Edge-augmented Graph Transformer (Hussain, Zaki, Subramanian, KDD'22), equations 3-9.

Each layer updates node channels h and edge channels e. Per head, with ĥ = LN(h), ê = LN(e):

    Ĥ = clip(Q(ĥ) K(ĥ)ᵀ / √d, lo, hi) + E(ê)            (3)  logits, also the edge update's input
    A = softmax(Ĥ) ⊙ σ(G(ê))                             (4)  gated attention
    V̂ = A V(ĥ) ⊙ ln(1 + Σ_j σ(G(ê))_ij)                 (8-9) centrality scaler, 1 on virtual nodes
    h ← h + O_h(V̂),  h ← h + FFN_h(h)                    (5-6)
    e ← e + O_e(Ĥ),  e ← e + FFN_e(e)                    (7)

Parameterisation follows the authors' PyTorch code (shamim-hussain/egt_pytorch) so that the
parameter counts agree: the edge channels are not updated in the last layer unless an edge
output is asked for (`output_edges`), and the graph output is the concatenated virtual nodes.
Departure in training: dropout masks are drawn by layers.keep_mask (drop rates exact to 2⁻¹⁷,
not to float precision).
Departure (gtscale's addition for graphs that are not molecules): with node_float_dim > 0 the
input node channels are a linear map of the continuous node features (Batch.node_feat_float)
instead of the authors' categorical embedding table.
Departure with attn_maskout (off in every shipped config): a pair masked out at random loses its
gate too, so it leaves the degree scaler's sum; the authors' code masks only its logit.

Layout: tokens and node pairs are kept packed (packing.py), so every linear layer, layer norm and
FFN runs on real rows only; attention alone runs dense and heads-major, [heads, B, M, M], where M
counts the virtual nodes first and then the graph's nodes, and E(ê), G(ê) arrive there from the
packed pairs by one row-wise scatter per layer. `gated_attention` below is eq. 4 and 8-9 in plain
torch; kernels/gated_attention.py computes the same with a hand-written backward, and runs
instead where that kernel is enabled (kernels/__init__.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.models.config import EGTConfig
from gtscale.models.embeddings import MASK_VALUE, FeatureEmbedding, embed_nodes, lookup, node_embedding
from gtscale.models.kernels import gated_attention as fused
from gtscale.models.kernels import use_kernel
from gtscale.models.layers import FeedForward, compute_dtype, dropout, keep_mask, run_layer
from gtscale.models.linear import Linear, matmul_nt
from gtscale.models.outputs import Outputs
from gtscale.models.packing import Packing


def gated_attention(h_hat: torch.Tensor, gate_logits: torch.Tensor, v: torch.Tensor, logit_mask: torch.Tensor,
                    gate_mask: torch.Tensor, keep: torch.Tensor | None, scale: float, num_virtual: int) -> torch.Tensor:
    """V̂ [heads, B, M, d] of eq. 4 and 8-9: the reference form, as the authors' code computes it.

    Ĥ and G [heads, B, M, M]; V [heads, B, M, d]; the masks broadcast over heads (logit_mask 0 where
    a pair may attend, MASK_VALUE where not; gate_mask 1 / 0); dropout's keep mask and scale, or
    None and 1; the number of virtual nodes, the first tokens, whose scaler is 1 (-1: no scalers)."""
    gates = torch.sigmoid(gate_logits) * gate_mask  # σ(G), 0 on masked pairs
    attn = torch.softmax(h_hat + logit_mask, dim=-1) * gates  # (4)
    if keep is not None:
        attn = attn * keep * scale  # attention dropout
    out = torch.matmul(attn, v)
    if num_virtual < 0:
        return out
    scaler = torch.log1p(gates.sum(dim=-1, keepdim=True))  # (8-9): ln(1 + Σ_j σ(G)_ij) ...
    virtual = torch.arange(out.shape[-2], device=out.device)[:, None] < num_virtual
    return out * torch.where(virtual, 1.0, scaler)  # ... and 1 on the virtual nodes


class AttentionContext:
    """Per-forward constants every layer shares: the packing and the masks, built once."""

    def __init__(self, packing: Packing, logit_mask: torch.Tensor, gate_mask: torch.Tensor, num_virtual: int):
        self.packing = packing
        self.logit_mask = logit_mask  # [1, B, 1 or M, M], 0 where a pair may attend, MASK_VALUE where not
        self.gate_mask = gate_mask  # same shape, 1 / 0
        self.num_virtual = num_virtual  # the first tokens are virtual nodes (scaler fixed to 1)


class EGTLayer(nn.Module):
    """One EGT layer on packed node rows h [T, d_h] and packed pair rows e [P, d_e]."""

    def __init__(self, cfg: EGTConfig, update_edges: bool):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.node_width // cfg.num_heads
        self.clip = tuple(cfg.clip_logits)
        self.gated = cfg.gated
        self.scale_degree = cfg.scale_degree
        self.attention_dropout = cfg.attention_dropout
        self.attn_maskout = cfg.attn_maskout
        self.update_edges = update_edges
        width, edge_width, heads = cfg.node_width, cfg.edge_width, cfg.num_heads

        self.ln_h = nn.LayerNorm(width)
        self.ln_e = nn.LayerNorm(edge_width)
        self.qkv = Linear(width, 3 * width)
        # E(ê) and G(ê) in one projection: the first `heads` outputs are E, the next `heads` G.
        self.edge_in = Linear(edge_width, (2 if cfg.gated else 1) * heads)
        self.out_h = Linear(width, width)
        self.node_dropout, self.edge_dropout = cfg.node_dropout, cfg.edge_dropout
        self.ffn_h = FeedForward(width, round(width * cfg.node_ffn_multiplier), cfg.activation, cfg.node_dropout)
        if update_edges:
            self.out_e = Linear(heads, edge_width)
            self.ffn_e = FeedForward(edge_width, round(edge_width * cfg.edge_ffn_multiplier), cfg.activation, cfg.edge_dropout)

    def attention(self, h: torch.Tensor, e: torch.Tensor, ctx: AttentionContext) -> tuple[torch.Tensor, torch.Tensor]:
        """(V̂ packed [T, d_h], Ĥ packed channels-major [heads, P]): eq. 3, 4 and 8-9 on the dense
        heads-major layout [heads, B, M, M]."""
        pack, heads = ctx.packing, self.num_heads
        qkv = pack.unpack_tokens(self.qkv(self.ln_h(h)))
        q, k, v = qkv.view(pack.num_graphs, pack.size, 3, heads, self.head_dim).permute(2, 3, 0, 1, 4).unbind(0)  # [heads, B, M, d]
        # E(ê) and G(ê) computed channels-major, [heads or 2·heads, P]: the layout the scatter takes
        edge_terms = matmul_nt(self.edge_in.weight, self.ln_e(e)) + self.edge_in.bias[:, None]
        edge_bias, *gate_logits = pack.pairs_to_channels(edge_terms).split(heads)  # [heads, B, M, M] each
        logits = torch.matmul(q * self.head_dim ** -0.5, k.transpose(-1, -2))
        h_hat = logits.clamp(*self.clip).add_(edge_bias)  # (3); clamp's backward needs only its input

        logit_mask, gate_mask = ctx.logit_mask, ctx.gate_mask
        if self.training and self.attn_maskout > 0:
            kept = keep_mask(h_hat.shape, self.attn_maskout, h_hat.device)[0]
            logit_mask, gate_mask = logit_mask.masked_fill(~kept, MASK_VALUE), gate_mask * kept
        p_drop = self.attention_dropout if self.training else 0.0
        keep, scale = keep_mask(h_hat.shape, p_drop, h_hat.device) if p_drop > 0 else (None, 1.0)
        if self.gated:
            attend = fused.gated_attention if use_kernel("gated_attention") else gated_attention
            out = attend(h_hat, gate_logits[0], v, logit_mask, gate_mask, keep, scale, ctx.num_virtual if self.scale_degree else -1)
        else:  # the ungated ablation: eq. 4 without σ(G)
            attn = torch.softmax(h_hat + logit_mask, dim=-1)
            out = torch.matmul(attn if keep is None else attn * keep * scale, v)
        v_hat = pack.pack_tokens(out.permute(1, 2, 0, 3).reshape(pack.num_graphs, pack.size, -1))
        return v_hat, pack.channels_to_pairs(h_hat)

    def forward(self, h: torch.Tensor, e: torch.Tensor, ctx: AttentionContext) -> tuple[torch.Tensor, torch.Tensor]:
        v_hat, h_hat = self.attention(h, e, ctx)
        h = h + dropout(self.out_h(v_hat), self.node_dropout, self.training)
        h = h + self.ffn_h(h)
        if self.update_edges:
            e = e + dropout(self.out_e(h_hat.t()), self.edge_dropout, self.training)
            e = e + self.ffn_e(e)
        return h, e


class VirtualNodes(nn.Module):
    """Learned virtual nodes ẽ_i, h̃_i prepended to every graph, with the paper's virtual-edge rule:
    e = ẽ_i between virtual node i and any graph node (both directions), ½(ẽ_i + ẽ_j) between
    virtual nodes i and j."""

    def __init__(self, count: int, node_width: int, edge_width: int):
        super().__init__()
        self.count = count
        self.node = nn.Parameter(torch.randn(count, node_width))
        self.edge = nn.Parameter(torch.randn(count, edge_width))

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h [B, N, d_h], e [B, N, N, d_e] → [B, V+N, d_h], [B, V+N, V+N, d_e]."""
        b, n = h.shape[:2]
        v = self.count
        h = torch.cat([self.node.expand(b, v, -1), h], dim=1)
        between = 0.5 * (self.edge[:, None] + self.edge[None, :])  # [V, V, d_e]
        top = torch.cat([between, self.edge[:, None].expand(v, n, -1)], dim=1)  # rows of virtual nodes
        left = self.edge[None, :].expand(n, v, -1)  # columns of virtual nodes
        bottom = torch.cat([left.expand(b, n, v, -1), e], dim=2)
        e = torch.cat([top.expand(b, v, v + n, -1), bottom], dim=1)
        return h, e


class EGT(nn.Module):
    """Batch → Outputs(node [B,N,d_h], edge [B,N,N,d_e] or None, graph [B, d_h·max(V,1)])."""

    def __init__(self, cfg: EGTConfig):
        super().__init__()
        self.cfg = cfg
        width, edge_width = cfg.node_width, cfg.edge_width
        self.node_dim, self.edge_dim = width, (edge_width if cfg.output_edges else 0)
        self.graph_dim = width * max(cfg.num_virtual_nodes, 1)

        self.node_embed = node_embedding(cfg.node_vocab, cfg.node_float_dim, width)
        self.svd_embed = Linear(2 * cfg.svd_rank, width) if cfg.svd_rank else None
        # hops 0..k, and k+1 for farther or unreachable pairs
        self.hop_embed = nn.Embedding(cfg.upto_hop + 2, edge_width)
        self.edge_embed = FeatureEmbedding(cfg.edge_vocab, edge_width)
        self.virtual_nodes = VirtualNodes(cfg.num_virtual_nodes, width, edge_width) if cfg.num_virtual_nodes else None
        self.layers = nn.ModuleList(
            EGTLayer(cfg, update_edges=not cfg.simple and (i < cfg.num_layers - 1 or cfg.output_edges))
            for i in range(cfg.num_layers)
        )
        self.final_ln_h = nn.LayerNorm(width)
        self.final_ln_e = nn.LayerNorm(edge_width) if cfg.output_edges else None

    @property
    def batch_fields(self) -> tuple[str, ...]:
        """Batch fields this model reads (the loader builds the optional ones only when asked)."""
        node = "node_feat_float" if self.cfg.node_float_dim else "node_feat"
        return (node, "node_mask", "edge_feat", "spd") + (("svd_pe",) if self.cfg.svd_rank else ())

    def _svd(self, svd_pe: torch.Tensor) -> torch.Tensor:
        """U√Σ ‖ V√Σ with any rank R ≥ r → the top r of each half, projected. The random sign
        flips of training happen in the loader; the model takes svd_pe as given."""
        r, half = self.cfg.svd_rank, svd_pe.shape[-1] // 2
        if half < r:
            raise ValueError(f"svd_pe holds rank {half}, the model needs svd_rank {r}")
        x = torch.cat([svd_pe[..., :r], svd_pe[..., half:half + r]], dim=-1)
        return self.svd_embed(x.to(self.svd_embed.weight.dtype))

    def _inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense input channels h [B, M, d_h], e [B, M, M, d_e], virtual nodes first."""
        if batch.spd is None:
            raise ValueError("EGT needs batch.spd (the hop matrix)")
        h = embed_nodes(self.node_embed, batch)
        if self.svd_embed is not None:
            if batch.svd_pe is None:
                raise ValueError("EGT with svd_rank > 0 needs batch.svd_pe")
            h = h + self._svd(batch.svd_pe)
        hops = batch.spd.clamp(max=self.cfg.upto_hop + 1)  # SPD_UNREACHABLE lands in the last row
        e = lookup(self.hop_embed, hops) + self.edge_embed(batch.edge_feat)
        if self.virtual_nodes is not None:
            h, e = self.virtual_nodes(h, e)
        return h, e

    def _context(self, batch: Batch, dtype: torch.dtype) -> AttentionContext:
        b, v = batch.num_graphs, self.cfg.num_virtual_nodes
        real = torch.cat([batch.node_mask.new_ones(b, v), batch.node_mask], dim=1)  # [B, M]
        allowed = real[None, :, None, :]  # [1, B, 1, M]: any real key (attention is heads-major)
        if self.cfg.constrained:
            # self and 1-hop neighbours; virtual nodes stay connected to everything
            near = F.pad(batch.spd <= 1, (v, 0, v, 0), value=True)
            allowed = allowed & near[None]
        logit_mask = torch.zeros(allowed.shape, dtype=dtype, device=real.device).masked_fill_(~allowed, MASK_VALUE)
        return AttentionContext(Packing.for_batch(batch, v), logit_mask, allowed.to(dtype), v)

    def forward(self, batch: Batch) -> Outputs:
        h, e = self._inputs(batch)
        ctx = self._context(batch, compute_dtype(h))
        pack, v = ctx.packing, self.cfg.num_virtual_nodes
        h, e = pack.pack_tokens(h), pack.pack_pairs(e)
        for layer in self.layers:
            h, e = run_layer(layer, self.cfg.activation_checkpointing and self.training, h, e, ctx)

        h = pack.unpack_tokens(self.final_ln_h(h))  # [B, M, d_h], zero on padding
        node = h[:, v:]
        if v:
            graph = h[:, :v].reshape(batch.num_graphs, -1)
        else:
            count = batch.node_mask.sum(dim=1, keepdim=True).clamp(min=1)
            graph = node.sum(dim=1) / count.to(node.dtype)
        edge = None
        if self.final_ln_e is not None:
            edge = pack.unpack_pairs(self.final_ln_e(e))[:, v:, v:]
        return Outputs(node=node, edge=edge, graph=graph)
