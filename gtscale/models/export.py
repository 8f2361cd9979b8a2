"""A gtscale export: the one folder format for a trained or imported model.

`gtscale export` (a run's checkpoint), `gtscale import-checkpoint` (an authors' checkpoint),
`gtscale baseline ecfp` and `gtscale baseline kernel` (their SVRs, `name: ecfp-svr` and
`kernel-svr`, which only `gtscale predict` reads) write it with `write_export`; init_from,
`gtscale evaluate` and anything that predicts read it with `read_export` / `read_weights` /
`load_exported`. The folder holds

    model.pt     tensors only (floating ones fp32), keys backbone.* and head.* (the layout of
                 ExportedModel); read with torch.load(weights_only=True), so nothing in it can run code
    model.yaml   the model config (a configs/models/ YAML) with the head in its `head` section
    export.json  where the weights came from (run_dir + tag, or source + format) and the parameter
                 count; its presence marks the folder as one gtscale wrote

Each file is written via a temporary name and a rename: a reader sees it whole or not at all.
The model modules themselves stay free of files; this module is where their weights meet disk.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from torch import nn

from gtscale.errors import UserError
from gtscale.io import atomic_write_text, claim_out_dir, load_failure_detail, refused_global, safe_torch_load

MODEL_FILE = "model.pt"
CONFIG_FILE = "model.yaml"
META_FILE = "export.json"
FILES = (MODEL_FILE, CONFIG_FILE, META_FILE)
#: What marks a folder as an export gtscale wrote (both writers record the parameter count).
EXPORT_MARKERS = {META_FILE: lambda meta: "parameters" in meta}


def claim_export_dir(out: str | os.PathLike, option: str = "--out") -> Path:
    """Refuse, before any work, an output folder that holds anything but an earlier export (gtscale.io.claim_out_dir)."""
    return claim_out_dir(out, EXPORT_MARKERS, option=option, nested=True)  # RUN/export may hold evaluate's RUN/export/<tag>/


class ExportedModel(nn.Module):
    """backbone + task head: the module whose state_dict an export's model.pt is (keys backbone.*, head.*).

    The trainer's task model is this with EGT's distance head added (which is not exported)."""

    def __init__(self, backbone: nn.Module, head: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, batch) -> torch.Tensor:
        return self.head(self.backbone(batch))


@dataclass
class Export:
    """An export read back: the model config (with `head`), the tensors, and export.json."""

    folder: Path
    config: dict
    state: dict[str, torch.Tensor]
    meta: dict


def build_exported(model_cfg: dict) -> ExportedModel:
    """The module an export's weights belong to, freshly initialised."""
    from gtscale.models import build_head, build_model

    backbone = build_model(model_cfg)
    return ExportedModel(backbone, build_head(model_cfg.get("head", {"kind": "graph"}), backbone))


def check_fits(state: dict, model_cfg: dict, where: str) -> ExportedModel:
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


def write_export(out: Path, state: dict[str, torch.Tensor], model_cfg: dict, meta: dict) -> Path:
    """Write the three files into `out` (contiguous copies of the tensors); returns `out`.

    The caller decides which tensors belong (the trainer drops its distance head); floating tensors
    are written as fp32, integer ones as they are; a folder that holds anything but an earlier
    export is refused before anything is written."""
    out = claim_export_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().float() if v.is_floating_point() else v.detach()).contiguous().clone() for k, v in state.items()}
    tmp = out / f"{MODEL_FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    tmp.replace(out / MODEL_FILE)
    atomic_write_text(out / CONFIG_FILE, yaml.safe_dump(model_cfg, sort_keys=False))
    atomic_write_text(out / META_FILE, json.dumps({**meta, "parameters": sum(v.numel() for v in state.values())}, indent=1))
    return out


def read_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """An export's model.pt (or any weights-only state dict file): name → tensor, nothing that runs code."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such model file (write it with `gtscale export` or `gtscale import-checkpoint`)")
    try:
        state = safe_torch_load(path)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, IndexError, struct.error, zipfile.BadZipFile) as err:
        if what := refused_global(err):
            raise UserError(f"{path}: refused: loading it would run code ({what}); a gtscale export holds tensors only") from err
        raise UserError(f"{path}: not a readable weights-only model file ({load_failure_detail(err)}); write it with `gtscale export`") from err
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UserError(f"{path}: expected a mapping of tensor names to tensors, got {type(state).__name__}")
    return state


def read_export(path: str | os.PathLike) -> Export:
    """The export in folder `path` (or the folder of `path`, its model.pt): config, weights, metadata.

    A missing or malformed file is a UserError naming it."""
    path = Path(path)
    folder = path.parent if path.name == MODEL_FILE and path.is_file() else path
    if not folder.is_dir():
        raise UserError(f"{folder}: no such export folder (write it with `gtscale export` or `gtscale import-checkpoint`)")
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder}: not a gtscale export (no {', '.join(missing)})")
    try:
        config = yaml.safe_load((folder / CONFIG_FILE).read_text())
        meta = json.loads((folder / META_FILE).read_text())
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{folder}: malformed {CONFIG_FILE} or {META_FILE} ({type(err).__name__}: {err})".replace("\n", " ")) from err
    if not isinstance(config, dict) or not isinstance(meta, dict):
        raise UserError(f"{folder}: {CONFIG_FILE} and {META_FILE} must each hold a mapping")
    return Export(folder, config, read_weights(folder / MODEL_FILE), meta)


def load_exported(path: str | os.PathLike) -> tuple[ExportedModel, Export]:
    """The export's model, built from its config with its weights loaded, in eval mode."""
    export = read_export(path)
    return check_fits(export.state, export.config, str(export.folder / MODEL_FILE)), export
