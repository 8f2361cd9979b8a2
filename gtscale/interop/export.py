"""Writing an imported model as a gtscale export: model.pt (tensors only, keys backbone.* and
head.*, read with torch.load(weights_only=True)), model.yaml (the model config with its head) and
export.json (where it came from), the files `gtscale export` writes and `init_from` reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import yaml
from torch import nn

from gtscale.errors import UserError
from gtscale.io import atomic_write_text
from gtscale.models import build_head, build_model


def build_exported(model_cfg: dict) -> nn.Module:
    """The module an export's weights belong to: .backbone and .head, as the trainer's task model."""
    module = nn.Module()
    module.backbone = build_model(model_cfg)
    module.head = build_head(model_cfg.get("head", {"kind": "graph"}), module.backbone)
    return module


def check_fits(state: dict, model_cfg: dict, where: str) -> nn.Module:
    """The model built from the config with the weights loaded; an error naming any key or shape
    that does not fit (an importer's contract with the model code)."""
    module = build_exported(model_cfg)
    expected = module.state_dict()
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items() if k in state and state[k].shape != v.shape]
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if wrong or missing or unexpected:
        raise UserError(f"{where}: does not fit the model (shapes {wrong}, missing {missing}, unexpected {unexpected})")
    module.load_state_dict(state)
    return module.eval()


def write_export(out: Path, state: dict, model_cfg: dict, meta: dict) -> None:
    """Writes the three files atomically (each appears whole or not at all)."""
    check_fits(state, model_cfg, meta.get("source", str(out)))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"model.pt.{os.getpid()}.tmp"
    torch.save({k: v.detach().float().contiguous().clone() for k, v in state.items()}, tmp)
    tmp.replace(out / "model.pt")
    atomic_write_text(out / "model.yaml", yaml.safe_dump(model_cfg, sort_keys=False))
    atomic_write_text(out / "export.json", json.dumps({**meta, "parameters": sum(v.numel() for v in state.values())}, indent=1))
