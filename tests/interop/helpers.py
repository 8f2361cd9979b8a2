"""Shared by the import tests: randomised gtscale models, and reading an export back."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from gtscale.models.export import build_exported


def randomised(model_cfg: dict, seed: int = 0) -> torch.nn.Module:
    """backbone + head with every parameter random (LayerNorms and biases too), padding rows zero."""
    torch.manual_seed(seed)
    module = build_exported(model_cfg)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
        for sub in module.modules():
            if isinstance(sub, torch.nn.Embedding) and sub.padding_idx is not None:
                sub.weight[sub.padding_idx] = 0
    return module.eval()


def load_export(folder: Path) -> torch.nn.Module:
    cfg = yaml.safe_load((folder / "model.yaml").read_text())
    module = build_exported(cfg)
    module.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
    return module.eval()


def outputs(module: torch.nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        out = module.backbone(batch)
        return out.node, module.head(out)
