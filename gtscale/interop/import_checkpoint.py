"""An authors' checkpoint → a gtscale export (OUT/model.pt, model.yaml, export.json), as
`gtscale import-checkpoint --format graphormer|egt PATH OUT [--set key=value ...]` asks.

--set overrides model options the weights do not determine (dropout rates, EGT's activation or
scale_degree, Graphormer's multi_hop_max_dist); `head.<field>` reaches the head."""

from __future__ import annotations

from pathlib import Path

import yaml

from gtscale.errors import UserError

FORMATS = ("graphormer", "egt")


def apply_overrides(cfg: dict, pairs: list[str]) -> dict:
    cfg = {**cfg, "head": dict(cfg["head"])}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--set {pair!r}: expected KEY=VALUE")
        target, field = (cfg["head"], key[5:]) if key.startswith("head.") else (cfg, key)
        if field in ("name", "head") or (field not in target and target is cfg and field not in _model_fields(cfg)):
            raise UserError(f"--set {key}: not an option of the {cfg['name']} model")
        target[field] = yaml.safe_load(value)
    return cfg


def _model_fields(cfg: dict) -> set[str]:
    from dataclasses import fields

    from gtscale.models import MODELS

    return {f.name for f in fields(MODELS[cfg["name"]][0])}


def import_checkpoint(format: str, path: str, out: str, overrides: list[str]) -> tuple[Path, dict, dict]:
    """The authors' checkpoint `path` (`format`: graphormer or egt) as a gtscale export in `out`,
    with `overrides` (KEY=VALUE, apply_overrides); (out, its tensors, its model config)."""
    from gtscale.interop.egt import import_egt
    from gtscale.models.export import check_fits, claim_export_dir, write_export
    from gtscale.interop.graphormer import import_graphormer
    from gtscale.interop.unpickle import load_foreign_checkpoint

    claim_export_dir(out, option="OUT")  # before reading a checkpoint that may be gigabytes
    checkpoint = load_foreign_checkpoint(path)
    importer = import_graphormer if format == "graphormer" else import_egt
    state, cfg = importer(checkpoint, path)
    cfg = apply_overrides(cfg, overrides)
    folder = Path(out)
    check_fits(state, cfg, str(path))
    write_export(folder, state, cfg, {"source": str(path), "format": format, "overrides": list(overrides)})
    return folder, state, cfg
