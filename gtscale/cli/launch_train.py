"""`launch/train [--nproc_per_node N] CONFIG [dotted.key=value ...] [--resume auto|never|TAG]`:
torchrun --standalone on one machine, with the preemption exit status passed on.

train/local_launch.py says how; launch/train runs `python -m gtscale.cli.launch_train`."""

from __future__ import annotations

import argparse
import sys

from gtscale.cli.train import add_arguments
from gtscale.errors import EXIT_USER_ERROR, UserError
from gtscale.train.local_launch import launch, local_accelerators


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="launch/train", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    default = local_accelerators()
    parser.add_argument("--nproc_per_node", "--nproc-per-node", type=int, default=default, help=f"training processes (default: one per GPU, else 1; here {default})")
    add_arguments(parser)  # gtscale train's own: CONFIG, overrides, --resume
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        return launch(args.nproc_per_node, args.config, args.overrides, args.resume)
    except UserError as err:
        print(f"launch/train: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
