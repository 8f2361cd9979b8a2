"""Layer pieces shared by the models: activations by name, dropout, the Pre-LN feed-forward
block, the compute dtype under autocast, and per-layer activation checkpointing."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu": F.elu,
    "relu": F.relu,
    "gelu": F.gelu,
}


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as F.dropout, with the keep mask drawn by rand_like: on CPU torch's
    bernoulli sampler costs several times more than the rest of an attention map's dropout."""
    if not training or p == 0:
        return x
    keep = torch.rand(x.shape, device=x.device).ge_(p)  # fp32 draws: exact keep rate in bf16 too
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


class FeedForward(nn.Module):
    """Pre-LN position-wise FFN, returning the residual branch: drop(W2 · drop_a(act(W1 · LN(x))))."""

    def __init__(self, width: int, hidden: int, activation: str, p: float = 0.0, p_activation: float = 0.0):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)
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
