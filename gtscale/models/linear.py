"""The models' matrix products with a weight: nn.Linear's function, with the fast CPU product.

Every weight product of the models goes through `linear` (and `Linear`, an nn.Linear with the same
parameters and state-dict keys), so that fp32 CPU products can run in oneDNN
(kernels/linear.py) where that kernel is enabled and applies; elsewhere they are F.linear.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.models.kernels import linear as onednn
from gtscale.models.kernels import use_kernel


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias): x [..., K] @ weight [N, K]ᵀ + bias [N] → [..., N]."""
    if use_kernel("linear") and onednn.applies(x, weight, bias):
        return onednn.linear(x, weight, bias)
    return F.linear(x, weight, bias)


def matmul_nt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [..., K] @ b [N, K]ᵀ → [..., N]."""
    return linear(a, b)


class Linear(nn.Linear):
    """nn.Linear (same parameters, state-dict keys and initialisation) computed by `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
