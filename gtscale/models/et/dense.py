"""Dense Energy Transformer for graph classification (Hoover et al., NeurIPS'23, App. D).

Tokens: a CLS token, then the graph's nodes, x_B = E(atom features) + W_lap · (Laplacian
eigenvectors, the first lap_k). One ET block (energy.py, eq. 2-7) descends T steps over the
attention structure

    N(C) = {B : edge B → C} ∪ {CLS}, N(CLS) = every node          (CLS row and column of A set to 1)
    Â_hCB = Conv(X⁰_C ⊙ X⁰_B)_h · A′_hCB                             (App. D's learned adjacency)

A′ embeds the edge B → C's features per head and is 1 on the CLS row and column (and on
self-loops when self_loops is set); pairs outside N(C) get logit −∞, so their weight and their
gradients are exactly zero. The graph output is the CLS token's gᵀ, the node outputs the nodes'.

Departures and interpretations, with reasons:
- "Conv2D(X ⊗ X)" is read as a 1×1 convolution over the pair grid with the D channels of
  X_C ⊙ X_B, i.e. a per-head bilinear form Σ_d w_hd X_Cd X_Bd + b_h. A wider kernel would mix
  neighbouring pairs of the grid, which depends on the node order and breaks permutation
  equivariance. It is computed as (X ⊙ w_h) X ᵀ, without the [B, M, M, D] product.
- Â is computed once from the initial embeddings X⁰ and held fixed over the T steps, so E is a
  function of g alone and the update stays its exact gradient. b_h starts at 1, so Â ≈ A′ at
  initialisation.
- The isolated node of a one-atom molecule still reads the CLS token, so every real query has a
  non-empty neighbourhood; padding tokens have none and stay zero.

Departures from the authors' graph-classification code (Lemon-cmd/energy-transformer-graph,
src/model/et.py and core.py, JAX; sizes in configs/models/et-graph.yaml):
- Their Â is Conv2D(3×3, H channels, no bias) of the one-channel map X Xᵀ, times Dense(edge
  features → H) with a bias; a 3×3 window mixes neighbouring (C, B) cells, which depends on the
  node order, so here the 1×1 per-head bilinear form above. They mask with Â == 0 → −∞, which
  after training also lets non-edges through wherever Dense's bias makes Â non-zero; here the
  mask is the graph's structure.
- They have one β per head (initialised 1/√Y) and an H×H matrix mixing the heads' scores before
  Â; here one β and no mixing (App. D's energy has neither).
- Their TU-dataset model runs 4 blocks with parameters of their own, one step each (block 4,
  depth 1); the paper's ET descends one energy, so one block takes all T steps here.
- Their CLS token also attends to itself (the adjacency's padded CLS row and column are 1,
  corner included); here N(CLS) is the nodes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.loader.batch import Batch
from gtscale.models.config import ETConfig
from gtscale.models.embeddings import FeatureEmbedding
from gtscale.models.et.energy import ETBlock
from gtscale.models.layers import run_layer
from gtscale.models.linear import Linear
from gtscale.models.outputs import Outputs


class DenseGraph:
    """Attention of eq. 3 over padded tokens [B, M, ...]: `allowed` [B, M, M] (query C, key B),
    `weight` Â [B, H, M, M] or None (= 1), `token_mask` [B, M] True on real tokens."""

    def __init__(self, allowed: torch.Tensor, weight: torch.Tensor | None, token_mask: torch.Tensor):
        self.allowed, self.weight, self.token_mask = allowed, weight, token_mask
        has_keys = allowed.any(-1)  # [B, M]: padding queries (and nothing else) have no key
        self.has_keys = has_keys[:, None, :, None]  # [B, 1, M, 1]
        # rows without a key are left unmasked so that one fused softmax stays finite; their
        # weights are then zeroed by has_keys
        self.blocked = (~allowed & has_keys[:, :, None])[:, None]  # [B, 1, M, M]

    def mask_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.token_mask[..., None].to(x.dtype)

    rows = None  # every token is updated

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        return x  # every token is updated

    def attention(self, q: torch.Tensor, k: torch.Tensor, beta: torch.Tensor, energy: bool):
        """(Σ_B p Â K_B [B, M, H, Y], Σ_C p Â Q_C [B, M, H, Y], E^ATT or None)."""
        qh, kh = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, M, Y]
        s = torch.matmul(qh, kh.transpose(-1, -2)).float()
        weight = self.weight.float() if self.weight is not None else None
        if weight is not None:
            s = s * weight
        s = (s * beta.float()).masked_fill(self.blocked, float("-inf"))
        p = torch.softmax(s, dim=-1) * self.has_keys
        w = (p * weight if weight is not None else p).to(q.dtype)
        t_query = torch.matmul(w, kh).transpose(1, 2)
        t_key = torch.matmul(w.transpose(-1, -2), qh).transpose(1, 2)
        e_att = None
        if energy:
            lse = torch.logsumexp(s, dim=-1, keepdim=True)
            e_att = -(torch.where(self.has_keys, lse, 0.0).sum()) / beta.float()
        return t_query, t_key, e_att


class DenseET(nn.Module):
    """Batch → Outputs(node [B, N, D], edge None, graph [B, D] = the CLS token's gᵀ)."""

    def __init__(self, cfg: ETConfig):
        super().__init__()
        self.cfg = cfg
        d, heads = cfg.node_width, cfg.num_heads
        self.node_dim, self.edge_dim, self.graph_dim = d, 0, d
        self.node_embed = FeatureEmbedding(cfg.node_vocab, d) if cfg.node_vocab else None
        self.lap_embed = Linear(cfg.lap_k, d) if cfg.lap_k else None
        self.cls = nn.Parameter(torch.randn(d) * 0.02) if cfg.cls_token else None
        if cfg.learned_adjacency:
            self.pair_weight = nn.Parameter(torch.randn(heads, d) / d)
            self.pair_bias = nn.Parameter(torch.ones(heads))
            self.edge_embed = FeatureEmbedding(cfg.edge_vocab, heads)
        self.block = ETBlock(d, heads, cfg.head_dim, cfg.num_memories, cfg.step_size, cfg.noise_std)

    @property
    def layers(self) -> list[nn.Module]:
        """The one block all T steps share (model-info lists layers)."""
        return [self.block]

    @property
    def batch_fields(self) -> tuple[str, ...]:
        return ("node_feat", "node_mask", "edge_feat") + (("lap_pe",) if self.cfg.lap_k else ())

    def embed(self, batch: Batch) -> torch.Tensor:
        """Node tokens x⁰ [B, N, D] (before the CLS token)."""
        x = 0
        if self.node_embed is not None:
            x = self.node_embed(batch.node_feat)
        if self.lap_embed is not None:
            if batch.lap_pe is None or batch.lap_pe.shape[-1] < self.cfg.lap_k:
                have = 0 if batch.lap_pe is None else batch.lap_pe.shape[-1]
                raise ValueError(f"ET with lap_k {self.cfg.lap_k} needs batch.lap_pe with that many eigenvectors, got {have} (shard with --lap-k)")
            x = x + self.lap_embed(batch.lap_pe[..., : self.cfg.lap_k].to(self.lap_embed.weight.dtype))
        return x

    def structure(self, batch: Batch, x: torch.Tensor) -> DenseGraph:
        """Neighbourhoods and Â of the tokens x [B, M, D] (CLS first when there is one)."""
        mask = batch.node_mask
        edge = (batch.edge_feat != 0).any(-1) & mask[:, :, None] & mask[:, None, :]  # [B, u, v]: u → v
        allowed = edge.transpose(1, 2)  # query C = v reads key B = u
        c = 1 if self.cls is not None else 0
        real = F.pad(mask, (c, 0), value=True)
        allowed = F.pad(allowed, (c, 0, c, 0), value=False)
        if c:
            allowed[:, 0, 1:] = mask
            allowed[:, 1:, 0] = mask
        eye = torch.eye(allowed.shape[1], dtype=torch.bool, device=mask.device)
        if self.cfg.self_loops:
            allowed = allowed | (eye & real[:, :, None])
        weight = None
        if self.cfg.learned_adjacency:
            a_prime = self.edge_embed(batch.edge_feat.transpose(1, 2)).permute(0, 3, 1, 2)  # [B, H, N, N], edge B → C at [C, B]
            a_prime = F.pad(a_prime, (c, 0, c, 0), value=1.0)
            if self.cfg.self_loops:
                a_prime = torch.where(eye, 1.0, a_prime)
            conv = torch.einsum("bcd,hd,bkd->bhck", x, self.pair_weight, x) + self.pair_bias[:, None, None]
            weight = conv * a_prime.to(conv.dtype)
        return DenseGraph(allowed, weight, real)

    def forward(self, batch: Batch) -> Outputs:
        x = self.embed(batch)
        b = batch.num_graphs
        if self.cls is not None:
            x = torch.cat([self.cls.to(x.dtype).expand(b, 1, -1), x], dim=1)
        graph = self.structure(batch, x)
        x = graph.mask_tokens(x)
        use_ckpt = self.cfg.activation_checkpointing and self.training
        for _ in range(self.cfg.num_steps):
            x = run_layer(self.block, use_ckpt, x, graph)
        g = graph.mask_tokens(self.block.norm(x))
        if self.cls is not None:
            return Outputs(node=g[:, 1:], edge=None, graph=g[:, 0])
        count = batch.node_mask.sum(1, keepdim=True).clamp(min=1).to(g.dtype)
        return Outputs(node=g, edge=None, graph=g.sum(1) / count)

    @torch.no_grad()
    def energies(self, batch: Batch) -> list[float]:
        """E at x⁰ and after each of the T steps (for the descent tests and diagnostics)."""
        x = self.embed(batch)
        if self.cls is not None:
            x = torch.cat([self.cls.to(x.dtype).expand(batch.num_graphs, 1, -1), x], dim=1)
        graph = self.structure(batch, x)
        x = graph.mask_tokens(x)
        out = [float(self.block.energy(x, graph))]
        for _ in range(self.cfg.num_steps):
            x = self.block(x, graph)
            out.append(float(self.block.energy(x, graph)))
        return out
