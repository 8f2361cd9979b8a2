"""`gtscale train CONFIG [dotted.key=value …] [--resume auto|never|TAG]`, one process per GPU/slot.

Start it with torchrun (`torchrun --nproc_per_node 2 -m gtscale.cli train …`, or `launch/train`,
which also passes on the preemption exit status 75: cli/launch_train.py), the deepspeed launcher
or srun; without any, it trains as a single process (train/launch_env.py). The configuration is
checked before any process group starts; train/trainer.py trains.
"""

from __future__ import annotations

import argparse
import os
import sys

from gtscale.train.preflight import load_train_config
from gtscale.train.launch_env import rendezvous_env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="training YAML (see configs/tasks/)")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value replacements, e.g. deepspeed.zero_stage=3")
    parser.add_argument("--resume", default="never", help="auto: newest complete checkpoint of run_dir; never (default): refuse a run_dir with checkpoints; or a tag")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # passed by the deepspeed launcher


def run(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)  # UserError → one line, exit 2, nothing started
    add, note = rendezvous_env(os.environ)
    os.environ.update(add)
    if note is not None:
        print(f"gtscale train: {note}", file=sys.stderr, flush=True)

    from gtscale.train.trainer import Trainer

    try:
        return Trainer(cfg, resume=args.resume).fit()
    except FloatingPointError as err:  # every rank agreed: too many non-finite losses in a row
        print(f"gtscale train: stopped: {err}", file=sys.stderr)
        return 1
