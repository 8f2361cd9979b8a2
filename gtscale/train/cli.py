"""`gtscale train CONFIG [dotted.key=value …] [--resume auto|never|TAG]`, one process per GPU/slot.

Start it with torchrun (`torchrun --nproc_per_node 2 -m gtscale.cli train …`), the deepspeed
launcher or srun. The configuration is checked before any process group starts.
"""

from __future__ import annotations

import argparse

from gtscale.train.config import load_train_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="training YAML (see configs/tasks/)")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value replacements, e.g. deepspeed.zero_stage=3")
    parser.add_argument("--resume", default="never", help="auto: newest complete checkpoint of run_dir; never (default): refuse a run_dir with checkpoints; or a tag")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # passed by the deepspeed launcher


def run(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)  # UserError → one line, exit 2, nothing started
    import sys

    from gtscale.train.trainer import Trainer

    try:
        return Trainer(cfg, resume=args.resume).fit()
    except FloatingPointError as err:  # every rank agreed: too many non-finite losses in a row
        print(f"gtscale train: stopped: {err}", file=sys.stderr)
        return 1
