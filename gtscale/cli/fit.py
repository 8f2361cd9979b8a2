"""`gtscale fit DATA.csv [VALID.csv TEST.csv] --target-column y --out DIR`: a CSV of molecules and a
measured property to a tested ensemble export that `gtscale predict DIR/export` reads (fit.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.fit import DEFAULT_BACKBONE, DEFAULT_RECIPE, RECIPES, fit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="CSV",
                        help="one CSV (split by --split) or three: train, valid and test (.csv/.smi, optionally compressed)")
    parser.add_argument("--out", required=True, help="folder for export/, members/, report.md, report.json, parity.png, test-predictions.csv")
    parser.add_argument("--smiles-column", default="smiles", help="SMILES column (default smiles)")
    parser.add_argument("--target-column", "--target-columns", dest="target_column", required=True, help="the measured property to fit (a numeric column)")
    parser.add_argument("--split", default="random",
                        help="one CSV: random (seeded 80/10/10), scaffold (Bemis-Murcko, balanced) or column:NAME "
                        "(a column naming each row's split: train, valid, test); default random")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random or scaffold split (default 0)")
    parser.add_argument("--recipe", choices=list(RECIPES), default=DEFAULT_RECIPE,
                        help="which members to fit: " + "; ".join(f"{k} = {' + '.join(v)}" for k, v in RECIPES.items())
                        + f" (default {DEFAULT_RECIPE})")
    parser.add_argument("--init-from", default=DEFAULT_BACKBONE,
                        help=f"the backbone whose representation the kernel member reads: an export folder or a shipped name (default {DEFAULT_BACKBONE})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuned member: one run per seed (default 0 1 2)")
    parser.add_argument("--finetune-overrides", nargs="+", default=[], metavar="KEY=VALUE",
                        help="fine-tuned member: dotted overrides of its training config, e.g. schedule.total_steps=3000")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    report = fit([Path(p) for p in args.inputs], out, smiles_column=args.smiles_column, target_column=args.target_column,
                 split=args.split, seed=args.seed, recipe=args.recipe, init_from=args.init_from, seeds=tuple(args.seeds),
                 finetune_overrides=tuple(args.finetune_overrides), progress=not args.no_progress)
    print((out / "report.md").read_text(), end="")
    print(f"wrote {out / 'export'} (gtscale predict reads it) and {out / 'report.json'} in {report['seconds']} s")
    return 0
