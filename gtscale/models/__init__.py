"""Graph transformer models: Batch → Outputs(node, edge, graph); task heads are separate modules.

Models are built from a config dict only (a YAML of configs/models/ loaded as a dict):

    model = build_model({"name": "egt", "num_layers": 6, ...})
    head = build_head({"kind": "graph", "num_outputs": 1, "hidden": [512, 512]}, model)
    scores = head(model(batch))

Model code knows nothing of devices, ranks, DeepSpeed or files; `load_model_config` is the one
place that reads configs/models/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from torch import nn

from gtscale.config import CONFIG_ROOT, from_dict, load_yaml
from gtscale.errors import UserError
from gtscale.models.config import EGTConfig, ETConfig, GraphormerConfig, HeadConfig, MNAGTConfig, current_field_names
from gtscale.models.egt import EGT
from gtscale.models.et import ET
from gtscale.models.mnagt import MNAGT
from gtscale.models.graphormer import Graphormer
from gtscale.models.heads import Head, head_input_dim
from gtscale.models.outputs import Outputs

__all__ = ["MODELS", "Outputs", "build_head", "build_model", "load_model_config", "model_config_dir", "parse_model_config"]

#: name in a model YAML → (its config dataclass, its module)
MODELS: dict[str, tuple[type, type]] = {
    "egt": (EGTConfig, EGT),
    "graphormer": (GraphormerConfig, Graphormer),
    "et": (ETConfig, ET),
    "mnagt": (MNAGTConfig, MNAGT),
}

#: Keys of a model YAML that are not fields of the model's config.
_STRUCTURAL_KEYS = ("name", "head")


def model_config_dir() -> Path:
    """configs/models/ shipped with the package."""
    return CONFIG_ROOT / "models"


def load_model_config(name_or_path: Union[str, Path]) -> dict:
    """A model YAML as a dict, by path or by the name of a file in configs/models/ (egt-small), its
    fields under their current names (models.config.RENAMED_FIELDS)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        candidate = model_config_dir() / f"{name_or_path}.yaml"
        if not candidate.is_file():
            known = sorted(p.stem for p in model_config_dir().glob("*.yaml"))
            raise UserError(f"{name_or_path}: no such model config (known: {', '.join(known)})")
        path = candidate
    return current_field_names(load_yaml(path), str(path))


def _split(cfg: dict) -> tuple[str, dict]:
    if not isinstance(cfg, dict):
        raise UserError(f"model config: expected a mapping, got {type(cfg).__name__}")
    name = cfg.get("name")
    if not isinstance(name, str) or name not in MODELS:
        raise UserError(f"name: {name!r} is not a model (known: {', '.join(MODELS)})")
    return name, {k: v for k, v in cfg.items() if k not in _STRUCTURAL_KEYS}


def parse_model_config(cfg: dict) -> Any:
    """The typed config (EGTConfig, GraphormerConfig) of a model config dict."""
    name, fields = _split(cfg)
    return from_dict(MODELS[name][0], fields)


def build_model(cfg: dict) -> nn.Module:
    """The model a config dict describes. Its optional `head` section is build_head's to read."""
    name, _ = _split(cfg)
    return MODELS[name][1](parse_model_config(cfg))


def build_head(cfg: Union[dict, HeadConfig], model: nn.Module) -> Head:
    """A task head sized for `model`'s outputs (see heads.py)."""
    head_cfg = cfg if isinstance(cfg, HeadConfig) else from_dict(HeadConfig, cfg, prefix="head.")
    try:
        in_dim = head_input_dim(head_cfg, model)
    except ValueError as err:
        raise UserError(f"head.kind: {err}") from err
    return Head(head_cfg, in_dim)
