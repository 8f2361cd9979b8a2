"""`gtscale export RUN_DIR [--tag best|latest|TAG]`: consolidated fp32 weights + the model config (train/export.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.errors import UserError
from gtscale.train.export import export

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory")
    parser.add_argument("--tag", default="best", help="best (default), latest, or a checkpoint tag such as step-00001000")
    parser.add_argument("--out", default=None, help="output folder (default RUN_DIR/export)")


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir}: not a run directory (no config.yaml)")
    out = export(run_dir, args.tag, Path(args.out) if args.out else run_dir / "export")
    print(f"wrote {out / 'model.pt'} and {out / 'model.yaml'}")
    return 0
