"""`gtscale import-checkpoint --format graphormer|egt PATH OUT [--set key=value ...]`: an authors'
checkpoint → a gtscale export (OUT/model.pt, model.yaml, export.json).

--set overrides model options the weights do not determine (dropout rates, EGT's activation or
scale_degree, Graphormer's multi_hop_max_dist); `head.<field>` reaches the head."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from gtscale.errors import UserError

FORMATS = ("graphormer", "egt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=FORMATS, help="graphormer: microsoft/Graphormer (fairseq); egt: egt_pytorch")
    parser.add_argument("path", help="the authors' checkpoint file")
    parser.add_argument("out", help="output folder for model.pt, model.yaml, export.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a model option (repeatable)")


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


def run(args: argparse.Namespace) -> int:
    from gtscale.interop.egt import import_egt
    from gtscale.models.export import check_fits, claim_export_dir, write_export
    from gtscale.interop.graphormer import import_graphormer
    from gtscale.interop.unpickle import load_foreign_checkpoint

    claim_export_dir(args.out, option="OUT")  # before reading a checkpoint that may be gigabytes
    checkpoint = load_foreign_checkpoint(args.path)
    importer = import_graphormer if args.format == "graphormer" else import_egt
    state, cfg = importer(checkpoint, args.path)
    cfg = apply_overrides(cfg, args.set)
    out = Path(args.out)
    check_fits(state, cfg, str(args.path))
    write_export(out, state, cfg, {"source": str(args.path), "format": args.format, "overrides": list(args.set)})
    print(f"wrote {out / 'model.pt'} and {out / 'model.yaml'} ({len(state)} tensors, {cfg['name']} with {cfg['num_layers']} layers)")
    return 0
