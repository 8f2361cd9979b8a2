"""Pretrained backbones that ship with the package, named wherever an export is asked for.

`init_from: moses-egt` in a training config, `gtscale baseline kernel --backbone moses-egt` and
`gtscale moleculeace-table --init-from moses-egt` read gtscale/pretrained/moses-egt/: an ordinary
export folder (model.pt, model.yaml, export.json; read like any other, tensors only) and its model
card, README.md (corpus, targets, steps, the command that rebuilds it, its downstream table).
A value that is an existing path is always that path: a folder of one's own named like a shipped
backbone wins over it.
"""

from __future__ import annotations

from pathlib import Path

from gtscale.errors import UserError
from gtscale.models.export import MODEL_FILE

#: Where the shipped backbones live, one export folder each (package data).
ROOT = Path(__file__).resolve().parents[1] / "pretrained"


def shipped() -> list[str]:
    """Names of the backbones this installation ships."""
    return sorted(p.name for p in ROOT.iterdir() if (p / MODEL_FILE).is_file()) if ROOT.is_dir() else []


def export_path(value: str) -> Path:
    """The export `value` names: an existing path as it is, else a shipped backbone's folder; a
    UserError naming the value and the shipped names when it is neither."""
    path = Path(value)
    if path.exists():
        return path
    if "/" not in value and (ROOT / value / MODEL_FILE).is_file():
        return ROOT / value
    names = ", ".join(shipped()) or "none"
    raise UserError(f"{value}: no such export (a folder or model.pt written by `gtscale export`), nor a shipped backbone (shipped: {names})")


def weights_path(value: str) -> Path:
    """The model.pt of the export `value` names (a model.pt path, an export folder or a shipped name)."""
    path = export_path(value)
    return path / MODEL_FILE if path.is_dir() else path
