"""`gtscale fit DATA.csv [VALID.csv TEST.csv] --target-columns y [z …] --out DIR`: a CSV of molecules
and measured properties (numbers or 0/1 labels) to a tested export that `gtscale predict DIR/export`
reads (fit/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.fit import DEFAULT_BACKBONE, DEFAULT_RECIPE, DUPLICATES, RECIPES, TASKS, fit
from gtscale.fit.plan import DEFAULT_BUDGET


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="CSV",
                        help="one CSV (split by --split) or three: train, valid and test (.csv/.smi, optionally compressed)")
    parser.add_argument("--out", required=True,
                        help="folder for export/, members/, report.md, report.json, parity.png (roc.png), test-predictions.csv")
    parser.add_argument("--smiles-column", default="smiles", help="SMILES column (default smiles)")
    parser.add_argument("--target-columns", "--target-column", dest="target_columns", nargs="+", required=True, metavar="COLUMN",
                        help="the measured properties to fit (numbers, or 0/1 labels; a blank cell: no label for that column): "
                        "`a b c` or, as gtscale shard takes them, `a,b,c`")
    parser.add_argument("--task", choices=["auto", *TASKS], default="auto",
                        help="auto (default): classification when every target column holds only 0 and 1, else regression")
    parser.add_argument("--split", default="random",
                        help="one CSV: random (seeded 80/10/10), scaffold (Bemis-Murcko, balanced) or column:NAME "
                        "(a column naming each row's split: train, valid, test); default random")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random or scaffold split (default 0)")
    parser.add_argument("--recipe", choices=["auto", *RECIPES], default=DEFAULT_RECIPE,
                        help="which members to fit: auto = by the set's size and --budget (the exact kernel members on small sets, the "
                        "landmark kernel model and the fine-tuned transformer on large ones); "
                        + "; ".join(f"{k} = {' + '.join(v)}" for k, v in RECIPES.items()) + f" (default {DEFAULT_RECIPE})")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="CPU_MINUTES",
                        help=f"the CPU minutes --recipe auto plans the members for (default {DEFAULT_BUDGET:g}: 40 k molecules on 2 cores "
                        "in about 20 minutes)")
    parser.add_argument("--init-from", default=None,
                        help=f"the backbone whose representation the kernel member reads: an export folder or a shipped name (default {DEFAULT_BACKBONE})")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="fine-tuned member: one run per seed (default 0 1 2)")
    parser.add_argument("--finetune-overrides", nargs="+", default=[], metavar="KEY=VALUE",
                        help="fine-tuned member: dotted overrides of its training config, e.g. schedule.total_steps=3000")
    parser.add_argument("--duplicates", choices=list(DUPLICATES), default="warn",
                        help="a molecule (by canonical SMILES) in several rows: warn (default: counted in the report, a warning when "
                        "test molecules are also in train or valid) or aggregate (one row per molecule, its targets averaged, before the split)")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")


def columns(given: list[str]) -> tuple[str, ...]:
    """--target-columns as named, each value split at its commas."""
    return tuple(name for value in given for name in value.split(",") if name)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    report = fit([Path(p) for p in args.inputs], out, smiles_column=args.smiles_column, target_columns=columns(args.target_columns), task=args.task,
                 split=args.split, seed=args.seed, recipe=args.recipe, init_from=args.init_from, seeds=tuple(args.seeds) if args.seeds else None,
                 finetune_overrides=tuple(args.finetune_overrides), duplicates=args.duplicates, progress=not args.no_progress, budget=args.budget)
    print((out / "report.md").read_text(), end="")
    print(f"wrote {out / 'export'} (gtscale predict reads it) and {out / 'report.json'} in {report['seconds']} s")
    return 0
