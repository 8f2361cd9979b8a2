"""What a timed training step of `gtscale bench model` runs on, with and without --authors: the
device the user names and AdamW in the fastest form that device has."""

from __future__ import annotations

import torch

from gtscale.errors import UserError


def device_named(name: str) -> str:
    """cpu, cuda or cuda:N; "auto" is cuda when present. A CUDA device without CUDA is refused."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device: {name} requested but CUDA is not available")
    return name


def adamw(params) -> tuple[torch.optim.Optimizer, str]:
    """AdamW over `params` (fused where the device has the kernel, else foreach) and its name."""
    try:
        return torch.optim.AdamW(params, lr=1e-4, fused=True), "AdamW (fused)"
    except (RuntimeError, TypeError):  # no fused kernel for this device
        return torch.optim.AdamW(params, lr=1e-4, foreach=True), "AdamW (foreach)"
