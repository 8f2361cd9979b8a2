"""`gtscale baseline kernel SHARDS --backbone EXPORT --out DIR`: the kernel SVR (an ECFP4 similarity,
Tanimoto or MinMax, + an RBF kernel on a pretrained export's representation; an SVC on a 0/1
classification task) on any graph-level shard folder's split, as a sweep row
(experiments/kernel_baseline.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.cli.baseline_ecfp import add_set_arguments
from gtscale.experiments.kernel_baseline import run_kernel_baseline
from gtscale.sweep import TABLE_FILE
from gtscale.models.pretrained import export_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", help="a graph-level shard folder (gtscale shard smiles-csv …, moleculeace --dataset …)")
    parser.add_argument("--backbone", required=True, help="a gtscale export folder, or a shipped backbone's name (moses-egt), whose representation the kernel reads")
    parser.add_argument("--out", required=True, help="folder for sweep.json / sweep.md, the predictions and the export")
    add_set_arguments(parser)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    run_kernel_baseline(Path(args.shards), export_path(args.backbone), out, args.split, args.target)
    print((out / TABLE_FILE).read_text(), end="")
    return 0
