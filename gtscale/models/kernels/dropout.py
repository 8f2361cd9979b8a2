"""The comparison that turns 16-bit draws into a dropout keep mask, as an op of its own.

layers.keep_mask draws dropout masks as 16-bit integers and keeps an element where its integer is
at least a threshold. Written in plain torch, torch.compile fuses that comparison into whatever
consumes the mask, and inductor's C++ code generation does not vectorise a loop that touches an
int16 value: fused into EGT's gate-and-dropout loop, it left the whole loop over each attention
map scalar (one std::exp per element: ~8 ms a layer of a compiled egt-small step on a CPU). As a
custom op, torch.compile keeps it a kernel of its own, and the consumer reads a bool mask, which
it vectorises. Eager, it is the same aten comparison, bit for bit.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("gtscale::keep_from_halves", mutates_args=())
def keep_from_halves(words: torch.Tensor, numel: int, threshold: int) -> torch.Tensor:
    """bool [numel]: the first `numel` 16-bit halves of the int32 `words` ≥ `threshold`."""
    return words.view(torch.int16)[:numel] >= threshold


@keep_from_halves.register_fake
def _(words: torch.Tensor, numel: int, threshold: int) -> torch.Tensor:
    return words.new_empty(numel, dtype=torch.bool)
