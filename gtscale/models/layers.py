"""Layer pieces shared by the models: activations by name, dropout, the Pre-LN feed-forward
block, the compute dtype under autocast, and per-layer activation checkpointing."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gtscale.models.kernels import use_kernel
from gtscale.models.kernels.dropout import keep_from_halves
from gtscale.models.linear import Linear

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu": F.elu,
    "relu": F.relu,
    "gelu": F.gelu,
}


#: Dropout draws one 16-bit random integer per element: p is applied as k / 2¹⁶, k = round(p · 2¹⁶).
_KEEP_LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """(keep, scale): dropout's boolean keep mask of `shape` at drop rate `p`, and 1 / keep rate.

    Drawn as 16-bit integers, two per random 32-bit word: on CPU that costs about 60 % of drawing
    one float per element (torch.rand) and half the generator calls under inductor, whose
    per-element Philox draw is a compiled step's costliest kernel. The drop rate is p to within
    2⁻¹⁷ (k / 2¹⁶ exactly), and `scale` is the inverse of the keep rate actually used, so that the
    expectation of the dropped tensor is exact."""
    numel = math.prod(shape)
    dropped = round(p * _KEEP_LEVELS)
    if dropped >= _KEEP_LEVELS:  # p = 1: nothing kept (the threshold would not fit in 16 bits)
        return torch.zeros(shape, dtype=torch.bool, device=device), 0.0
    words = torch.randint(-(2**31), 2**31 - 1, ((numel + 1) // 2,), dtype=torch.int32, device=device)
    threshold = dropped - _KEEP_LEVELS // 2  # k / 2¹⁶ of the signed 16-bit halves lie below it
    if use_kernel("dropout_mask"):
        keep = keep_from_halves(words, numel, threshold)
    else:
        keep = words.view(torch.int16)[:numel] >= threshold
    return keep.view(shape), _KEEP_LEVELS / (_KEEP_LEVELS - dropped)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as F.dropout, with keep_mask's cheaper draws (torch's bernoulli sampler
    costs several times more on CPU than the rest of an attention map's dropout)."""
    if not training or p == 0:
        return x
    keep, scale = keep_mask(x.shape, p, x.device)
    return x.mul(keep).mul_(scale)


class FeedForward(nn.Module):
    """Pre-LN position-wise FFN, returning the residual branch: drop(W2 · drop_a(act(W1 · LN(x))))."""

    def __init__(self, width: int, hidden: int, activation: str, p: float = 0.0, p_activation: float = 0.0):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = Linear(width, hidden)
        self.fc2 = Linear(hidden, width)
        self.act = ACTIVATIONS[activation]
        self.p, self.p_activation = p, p_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(self.ln(x))

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """The block without its LayerNorm, for Post-LN models that normalise after the sum."""
        hidden = dropout(self.act(self.fc1(x)), self.p_activation, self.training)
        return dropout(self.fc2(hidden), self.p, self.training)


def compute_dtype(reference: torch.Tensor) -> torch.dtype:
    """The dtype attention logits will have: autocast's when it is on for this device, else the
    reference's. Attention biases and masks are built in it once per forward, so no layer mixes
    an fp32 mask into bf16 logits (cuDNN's SDPA misreads that combination)."""
    device_type = reference.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return reference.dtype


def run_layer(layer: nn.Module, use_checkpoint: bool, *args):
    """layer(*args), recomputed in backward instead of stored when `use_checkpoint` is set and
    gradients are being recorded. Non-reentrant checkpointing restores the RNG state, so dropout
    and random attention masks replay identically and gradients equal the plain run's."""
    if use_checkpoint and torch.is_grad_enabled():
        return checkpoint(layer, *args, use_reentrant=False)
    return layer(*args)
