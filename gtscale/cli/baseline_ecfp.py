"""`gtscale baseline ecfp SHARDS --out DIR [--seeds 0 1 2]`: ECFP4 + SVR / RF on a MoleculeACE shard
set's split, as sweep rows (experiments/ecfp.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.experiments.ecfp import RF_TREES, run_baseline
from gtscale.experiments.sweep import TABLE_FILE

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", help="a MoleculeACE shard folder (gtscale shard moleculeace --dataset …)")
    parser.add_argument("--out", required=True, help="folder for sweep.json / sweep.md")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (the forest's; default 0 1 2)")
    parser.add_argument("--models", nargs="+", choices=["svr", "rf"], default=["svr", "rf"])
    parser.add_argument("--split", default="test", help="split to score (default test)")
    parser.add_argument("--trees", type=int, default=RF_TREES, help=f"random forest size (default {RF_TREES})")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    run_baseline(Path(args.shards), out, args.seeds, args.models, args.split, args.trees)
    print((out / TABLE_FILE).read_text(), end="")
    return 0
