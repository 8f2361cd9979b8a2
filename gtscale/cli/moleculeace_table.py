"""`gtscale moleculeace-table --out DIR [--sets …] [--arms …] [key=value …]`: the MoleculeACE
benchmark as one table, every arm on the same shards of each set (experiments/moleculeace_table.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gtscale.experiments.moleculeace_table import ALL_ARMS, ARMS, markdown, moleculeace_table

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="dotted.key=value for every trained arm (e.g. schedule.total_steps=600)")
    parser.add_argument("--out", required=True, help="folder of the shards, the arms' sweep folders and table.md / table.json")
    parser.add_argument("--sets", nargs="+", default=None, help="MoleculeACE sets (default: all 30 the package bundles)")
    parser.add_argument("--arms", nargs="+", choices=ALL_ARMS, default=list(ALL_ARMS), help=f"arms, in table order (default: {' '.join(ALL_ARMS)})")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds of every trained arm (default 0 1 2)")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the validation split carved from each set's train split (default 0)")
    parser.add_argument("--resplit", action="store_true",
                        help="seed S > 0 of each trained arm carves its validation split with split seed --split-seed + S (its own shards)")
    parser.add_argument("--refit", action="store_true",
                        help="each trained seed, its step chosen on validation, trains again on train+valid for that many steps (`gtscale sweep --refit`)")
    parser.add_argument("--config", action="append", default=[], metavar="ARM=YAML", help="replace an arm's training config")
    parser.add_argument("--override", action="append", default=[], metavar="ARM:key=value", help="an override for one arm only")
    parser.add_argument("--init-from", default=None,
                        help="the pretrained export the fine-tuned arms start from and the kernel arm reads (default: the finetune config's init_from)")
    parser.add_argument("--graph-features", default=None, help="the features arm's `gtscale shard --graph-features` value (default morgan2048)")
    parser.add_argument("--ensemble-of", default=None, choices=list(ARMS), help="the arm whose seeds the ensemble averages (default: the last trained arm)")
    parser.add_argument("--shard-args", default="", help="extra `gtscale shard` options for every set, one string (e.g. \"--lap-k 0\")")
    parser.add_argument("--nproc", type=int, default=1, help="processes per training run (torchrun); default 1")
    parser.add_argument("--json", action="store_true", help="print table.json instead of the Markdown")


def run(args: argparse.Namespace) -> int:
    table = moleculeace_table(Path(args.out), sets=args.sets, arms=args.arms, seeds=args.seeds, split_seed=args.split_seed,
                              overrides=args.overrides, configs=args.config, arm_overrides=args.override, init_from=args.init_from,
                              graph_features=args.graph_features, ensemble_of=args.ensemble_of, shard_args=args.shard_args, nproc=args.nproc,
                              resplit=args.resplit, refit=args.refit)
    print(json.dumps(table, indent=1) if args.json else markdown(table), end="\n" if args.json else "")
    return 0
