"""`gtscale bench fit`: `gtscale fit`'s time, memory and test metric by molecules × target columns, on labelled MOSES molecules (bench/fit.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.bench.fit import COLUMNS, SIZES, bench_fit
from gtscale.fit.plan import DEFAULT_BUDGET


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for data/ (the labelled CSVs), runs/ (each fit) and fit-scaling.md / .json")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help=f"molecules (default {' '.join(map(str, SIZES))})")
    parser.add_argument("--columns", type=int, nargs="+", default=list(COLUMNS), help=f"target columns (default {' '.join(map(str, COLUMNS))})")
    parser.add_argument("--task", choices=["regression", "classification"], default="regression", help="default regression")
    parser.add_argument("--recipe", default="auto", help="gtscale fit's --recipe (default auto)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help=f"gtscale fit's --budget, CPU minutes (default {DEFAULT_BUDGET:g})")
    parser.add_argument("--split", choices=["random", "scaffold"], default="random", help="gtscale fit's --split (default random)")
    parser.add_argument("--seed", type=int, default=0, help="the molecules drawn, the missing cells and fit's split (default 0)")
    parser.add_argument("--workers", type=int, default=1, help="processes computing the labels (default 1)")
    parser.add_argument("--json", dest="json_path", help="also write the table to this JSON file")


def run(args: argparse.Namespace) -> int:
    return bench_fit(Path(args.out), args.sizes, args.columns, args.task, args.recipe, args.budget, args.seed, args.workers, args.json_path, args.split)
