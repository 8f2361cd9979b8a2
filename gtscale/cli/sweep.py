"""`gtscale sweep CONFIG --seeds 0 1 2 [key=value …]`: one ordinary run per seed, then a table; `--compare`
sweeps in one table (gtscale/sweep.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.errors import UserError
from gtscale.sweep import SWEEP_FILE, TABLE_FILE, best_step, compare_table, refit_overrides, run_sweep

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="training YAML (omit with --compare)")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value replacements for every seed")
    # strings: `--seeds 0 1 2 key=value` is read as seeds then overrides (split_seeds)
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"], help="seeds to run (default 0 1 2); overrides may follow")
    parser.add_argument("--nproc", type=int, default=1, help="processes per run (torchrun --standalone); 1 = a single process")
    parser.add_argument("--split", default="test", help="split scored with the best-validation checkpoint (default test)")
    parser.add_argument("--label", default=None, help="row name in tables (default: the config's file name)")
    parser.add_argument("--refit", action="store_true",
                        help="after choosing each seed's step on validation, train again on train+valid for that many steps; score that model")
    parser.add_argument("--collect", action="store_true", help="do not train: evaluate and aggregate the seed runs already there")
    parser.add_argument("--print-run-dir", action="store_true", help="print the sweep's folder (the config's run_dir; seeds go to seed-S in it) and exit (slurm/sweep.sbatch)")
    parser.add_argument("--print-refit-overrides", action="store_true",
                        help="print the overrides that make the one seed's trained run its refit (one per line) and exit (slurm/sweep.sbatch)")
    parser.add_argument("--compare", nargs="+", metavar="SWEEP_DIR", help="one table from existing sweep folders (each with sweep.json)")
    parser.add_argument("--out", default=None, help="--compare: also write the table to this Markdown file")


def split_seeds(values: list[str], overrides: list[str]) -> tuple[list[int], list[str]]:
    """argparse hands `--seeds 0 1 key=value` all to --seeds: the key=value items are overrides."""
    seeds = []
    for value in values:
        if "=" in value:
            overrides = [*overrides, value]
        elif value.isdigit():
            seeds.append(int(value))
        else:
            raise UserError(f"--seeds: {value!r} is not a seed (a whole number >= 0) nor a key=value override")
    if not seeds:
        raise UserError("--seeds: give at least one seed")
    return seeds, overrides


def seed_refit_overrides(config: str, overrides: list[str], seeds: list[int]) -> list[str]:
    """The refit's overrides of one seed whose validated run has trained (its step read from best.json)."""
    if len(seeds) != 1:
        raise UserError(f"--print-refit-overrides: give one seed, got {seeds}")
    from gtscale.train.preflight import load_train_config

    validated = Path(load_train_config(config, overrides).run_dir) / f"seed-{seeds[0]}"
    return refit_overrides(config, overrides, best_step(validated))


def run(args: argparse.Namespace) -> int:
    if args.compare:
        print(compare_table([Path(folder) for folder in args.compare], Path(args.out) if args.out else None), end="")
        return 0
    if not args.config:
        raise UserError("give a CONFIG to sweep, or --compare SWEEP_DIR …")
    seeds, overrides = split_seeds(args.seeds, args.overrides)
    if args.print_run_dir:
        from gtscale.train.preflight import load_train_config

        print(load_train_config(args.config, overrides).run_dir)
        return 0
    if args.print_refit_overrides:
        print("\n".join(seed_refit_overrides(args.config, overrides, seeds)))
        return 0
    base = run_sweep(args.config, overrides, seeds, args.nproc, args.split, args.label, args.collect, refit=args.refit)
    print((base / TABLE_FILE).read_text(), end="")
    print(f"wrote {base / SWEEP_FILE} and {base / TABLE_FILE}")
    return 0
