"""`gtscale plot RUN_DIR`: training loss, evaluation metrics and learning rate to one PNG (train/plot.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.train.plot import plot_run

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")


def run(args: argparse.Namespace) -> int:
    out = plot_run(Path(args.run_dir), Path(args.out) if args.out else None)
    print(f"wrote {out}")
    return 0
