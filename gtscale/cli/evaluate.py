"""`gtscale evaluate RUN_DIR [--split test] [--tag best]`: score one split with a run's checkpoint (train/evaluate.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.train.evaluate import evaluate_run

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory")
    parser.add_argument("--split", default="test", help="split of the run's shards to score (default test)")
    parser.add_argument("--tag", default="best", help="best (default: the best-validation checkpoint), latest, or a checkpoint tag")
    parser.add_argument("--inference", choices=("sampled", "full"), default=None,
                        help="graph stores: score sampled batches, or every node with all its neighbours (default: the run's data.graph.inference)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (full inference)")


def run(args: argparse.Namespace) -> int:
    result = evaluate_run(Path(args.run_dir), args.split, args.tag, args.inference, progress=not args.no_progress)
    print(f"{args.run_dir} {result['split']} at {result['tag']}: " + " ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items()))
    return 0
