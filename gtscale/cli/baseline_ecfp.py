"""`gtscale baseline ecfp SHARDS --out DIR [--seeds 0 1 2]`: ECFP4 + SVR / RF (an SVC on a 0/1
classification task) on any graph-level shard folder's split, as sweep rows (experiments/ecfp.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.experiments.ecfp import RF_TREES, run_baseline
from gtscale.sweep import TABLE_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", help="a graph-level shard folder (gtscale shard smiles-csv …, moleculeace --dataset …)")
    parser.add_argument("--out", required=True, help="folder for sweep.json / sweep.md")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (the forest's; default 0 1 2)")
    parser.add_argument("--models", nargs="+", choices=["svr", "rf"], default=["svr", "rf"],
                        help="svr: the Tanimoto SVR (an SVC on a classification task); rf: the random forest")
    add_set_arguments(parser)
    parser.add_argument("--trees", type=int, default=RF_TREES, help=f"random forest size (default {RF_TREES})")


def add_set_arguments(parser: argparse.ArgumentParser) -> None:
    """The molecules both baselines fit and score (experiments/baseline_set.py)."""
    parser.add_argument("--split", default="test", help="split to score (default test); the model is fitted on train and valid")
    parser.add_argument("--target", default=None, help="target to fit, by name (default: the shards' only one)")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    run_baseline(Path(args.shards), out, args.seeds, args.models, args.split, args.trees, args.target)
    print((out / TABLE_FILE).read_text(), end="")
    return 0
