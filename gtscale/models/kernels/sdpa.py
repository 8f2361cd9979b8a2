"""Graphormer's biased attention through torch's fused scaled_dot_product_attention (SDPA).

softmax(q kᵀ / √d + bias) v, graphormer.biased_attention's function, in one fused kernel: on a GPU
the memory-efficient or cuDNN kernel, which reads the bias in place (graphormer.py allocates it
aligned for that) and keeps no [B, heads, M, M] map for backward. SDPA's dropout draws its own
masks, so with attention dropout the two paths drop different (equally distributed) entries.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def applies(q: torch.Tensor, p: float) -> bool:
    """Not on a CPU with attention dropout: there SDPA has no fused kernel that takes dropout, and
    its unfused math draws the mask with torch's bernoulli sampler, 11 % of a graphormer-base
    training step (docs/results/cpu-speed.md); the reference with layers.keep_mask's draws is
    the same math for less."""
    return p == 0 or q.device.type != "cpu"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, p: float) -> torch.Tensor:
    """softmax(q kᵀ / √d + bias) v with dropout p on the map; q, k, v [B, heads, M, d]."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
