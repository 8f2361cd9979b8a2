"""The Energy Transformer block (Hoover et al., "Energy Transformer", NeurIPS 2023, §2), shared by
the dense (App. D) and sparse (App. C) graph models. The equation numbers below are UNVERIFIED:
written from the paper's §2 as recalled, and the paper's text was not reachable when they were
checked (arXiv 2302.07253: only its abstract and opening are in the stored corpora; neither the
authors' graph repositories nor bhoov/energy-transformer-jax cite equation numbers). Check them
against the published version; the energy-decrease claim (7) is the one cited elsewhere as eq. 20:

    g_A = γ (x_A − x̄_A) / √(var(x_A) + ε) + δ                               (2) energy LayerNorm, scalar γ
    K_αhB = Σ_j W^K_αhj g_jB,   Q_αhC = Σ_j W^Q_αhj g_jC
    E^ATT = −(1/β) Σ_h Σ_C log Σ_{B ∈ N(C)} exp(β Σ_α K_αhB Q_αhC Â_hCB)      (3) attention energy
    E^HN  = −½ Σ_B Σ_μ ReLU(Σ_j ξ_μj g_jB)²                                  (5) Hopfield energy
    τ dx/dt = −∂E/∂g,  E = E^ATT + E^HN                                      (6) dynamics; dE/dt ≤ 0 (7)

N(C) is C's in-neighbourhood (edges B → C; + C itself with self_loops); Â = 1 except in the dense
App. D model, where it is the learned adjacency (held fixed during the descent, so E is a
function of g alone). Discretised with step α and training-only noise: x ← x − α ∂E/∂g + √α ε.

The update is the closed form of −∂E/∂g (no autograd inside the dynamics, so training never
takes a double backward); with p_hCB the softmax over B ∈ N(C) of the logits in (3):

    −∂E/∂g_A = Σ_h [ W^Qᵀ Σ_B p_hAB Â_hAB K_hB   (A as the query)
                   + W^Kᵀ Σ_C p_hCA Â_hCA Q_hC ] (A as a key)
               + ξᵀ ReLU(ξ g_A)

tests/models/test_et.py proves it equal to autograd's gradient of `energy` to 1e-5.
A query with an empty neighbourhood contributes no term to (3) (log of an empty sum).

Departures from the authors' PyTorch code (zhuergou/Energy-Transformer-for-Graph-Anomaly-Detection):
- Their logits are exp(clamp(KQ/β, −5, 5)) with β initialised to √Y: β divides. We follow the
  paper's (3), β multiplies, initialised to 1/√Y (the same logits at initialisation). We do not
  clamp: a clamp makes the update differ from the energy's gradient (its derivative is zero
  outside the range) and the softmax is computed stably by subtracting each row's maximum.
- Their "energy" (β · Σ log z) is not the function their update descends; ours is.
- Their LayerNorm has a vector γ (nn.LayerNorm); the paper's (2) has a scalar γ, which makes g the
  gradient of a convex Lagrangian and gives (7). We use the scalar γ.
- They repeat one block T−1 times and end with a second block of its own parameters; the paper
  descends one energy, so all T steps share one block here.
- Their Q, K have the shape [D, H, Y] with Y = D and their step size is 1; both are config fields.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.models.linear import linear, matmul_nt


class EnergyLayerNorm(nn.Module):
    """Eq. 2: LayerNorm with one scalar γ (> 0 keeps the Lagrangian convex) and a bias vector δ."""

    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        # γ and β are one-element vectors, not 0-dim tensors: DeepSpeed broadcasts every parameter
        # as bytes at start-up (p.view(torch.uint8)), which a 0-dim tensor refuses
        self.gamma = nn.Parameter(torch.ones(1))
        self.delta = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's fused LayerNorm with γ as a weight of D equal entries: one pass forward and two
        # backward where the written-out form takes about twenty over a [N, D] tensor
        width = x.shape[-1]
        return F.layer_norm(x, (width,), self.gamma.expand(width), self.delta, self.eps)


class ETBlock(nn.Module):
    """The shared parameters and one descent step on tokens x [..., D] over a `graph`, which
    supplies the attention part (DenseGraph, EdgeGraph or TargetedEdgeGraph) and says which tokens
    the step updates: `graph.rows_of(x)`, every token's row but for a TargetedEdgeGraph."""

    def __init__(self, width: int, num_heads: int, head_dim: int, num_memories: int, step_size: float, noise_std: float):
        super().__init__()
        self.norm = EnergyLayerNorm(width)
        self.wq = nn.Parameter(torch.randn(num_heads, head_dim, width) / math.sqrt(width))
        self.wk = nn.Parameter(torch.randn(num_heads, head_dim, width) / math.sqrt(width))
        self.beta = nn.Parameter(torch.full((1,), 1.0 / math.sqrt(head_dim)))  # one element: see EnergyLayerNorm.gamma
        bound = 1.0 / math.sqrt(width)
        self.xi = nn.Parameter(torch.empty(num_memories, width).uniform_(-bound, bound))
        self.step_size, self.noise_std = step_size, noise_std

    def queries_keys(self, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """g [..., D] → Q, K [..., H, Y]."""
        h, y, d = self.wq.shape
        qk = linear(g, torch.cat([self.wq, self.wk]).reshape(2 * h * y, d))
        q, k = qk.unflatten(-1, (2, h, y)).unbind(-3)
        return q, k

    def pairs(self) -> torch.Tensor:
        """M_h = W^Qᵀ_h W^K_h [H, D, D]: q_A·k_B = g_Aᵀ M_h g_B, and the attention update at A is
        Σ_h M_h Σ_B p_AB g_B + M_hᵀ Σ_C p_CA g_C (the two terms of −∂E/∂g_A above)."""
        return torch.einsum("hyi,hyj->hij", self.wq, self.wk)

    def descent(self, g: torch.Tensor, graph) -> torch.Tensor:
        """−∂E/∂g in closed form at the graph's updated tokens, [..., D]; zero on its padding tokens."""
        if graph.rows is not None:  # a step at some tokens only (TargetedEdgeGraph), in the space of g
            pairs = self.pairs()
            read, collected, g_rows = graph.attention_of_g(g, pairs, self.beta[0])
            update = torch.einsum("hij,nhj->ni", pairs, read) + torch.einsum("hji,nhj->ni", pairs, collected)
            return update + self.hopfield(g_rows)
        q, k = self.queries_keys(g)
        t_query, t_key = graph.attention(q, k, self.beta[0], energy=False)[:2]
        h, y, d = self.wq.shape
        w = torch.cat([self.wq, self.wk]).reshape(2 * h * y, d)
        update = matmul_nt(torch.cat([t_query, t_key], dim=-2).flatten(-2), w.t())
        return graph.mask_tokens(update + self.hopfield(g))

    def hopfield(self, g: torch.Tensor) -> torch.Tensor:
        """−∂E^HN/∂g = ξᵀ ReLU(ξ g), [..., D]: each token's own term of the update."""
        return matmul_nt(F.relu(linear(g, self.xi)), self.xi.t())

    def forward(self, x: torch.Tensor, graph) -> torch.Tensor:
        """One step x ← x − α ∂E/∂g (+ √α ε while training), at the graph's updated tokens."""
        out = graph.rows_of(x) + self.step_size * self.descent(self.norm(x), graph)
        if self.training and self.noise_std > 0:  # drawn for every token, so that a restricted step draws the same
            noise = torch.randn_like(x) * (self.noise_std * math.sqrt(self.step_size))
            out = out + graph.mask_tokens(graph.rows_of(noise))
        return out

    def energy(self, x: torch.Tensor, graph) -> torch.Tensor:
        """E^ATT + E^HN of eq. 3 and 5 at state x: a scalar (fp32), summed over the batch."""
        g = self.norm(x)
        return self.energy_of_g(g, graph)

    def energy_of_g(self, g: torch.Tensor, graph) -> torch.Tensor:
        q, k = self.queries_keys(g)
        e_att = graph.attention(q, k, self.beta[0], energy=True)[2]
        hidden = graph.mask_tokens(F.relu(linear(g, self.xi)))
        return e_att - 0.5 * hidden.float().square().sum()
