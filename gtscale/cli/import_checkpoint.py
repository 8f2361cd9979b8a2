"""`gtscale import-checkpoint --format graphormer|egt PATH OUT [--set key=value ...]`: an authors'
checkpoint → a gtscale export (interop/import_checkpoint.py)."""

from __future__ import annotations

import argparse

from gtscale.interop.import_checkpoint import FORMATS, import_checkpoint

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=FORMATS, help="graphormer: microsoft/Graphormer (fairseq); egt: egt_pytorch")
    parser.add_argument("path", help="the authors' checkpoint file")
    parser.add_argument("out", help="output folder for model.pt, model.yaml, export.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a model option (repeatable)")


def run(args: argparse.Namespace) -> int:
    out, state, cfg = import_checkpoint(args.format, args.path, args.out, args.set)
    print(f"wrote {out / 'model.pt'} and {out / 'model.yaml'} ({len(state)} tensors, {cfg['name']} with {cfg['num_layers']} layers)")
    return 0
