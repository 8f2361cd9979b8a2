"""`launch/gpu-check --budget SECONDS --out DIR`: a GPU node's health and speed within a time budget
(bench/gpu_check.py). `python -m gtscale.cli.gpu_check`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gtscale.bench import gpu_check
from gtscale.bench.gpu_check import BENCH_MODELS, claim_empty, plan
from gtscale.config import CONFIG_ROOT
from gtscale.errors import EXIT_USER_ERROR, UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="a new or empty folder: the report, logs, shards and runs")
    parser.add_argument("--budget", type=float, default=600, help="seconds for the whole check (default 600)")
    parser.add_argument("--shards", type=Path, default=None, help="nci-tpsa shards to reuse (default: shard them into --out)")
    parser.add_argument("--config", default=str(CONFIG_ROOT / "tasks" / "nci-tpsa.yaml"), help="the training task (default: nci-tpsa)")
    parser.add_argument("--bench-models", nargs="*", default=list(BENCH_MODELS), help="models for `gtscale bench model` (none: skip)")
    parser.add_argument("--batch", type=int, action="append", default=None,
                        help="molecules per GPU of each benchmark (repeatable; default 256; the first is profiled)")
    parser.add_argument("--compile", action="store_true", help="train with the model compiled (compile.enabled, pad_to_bucket)")
    parser.add_argument("--cpu", action="store_true", help="the same flow on 2 CPU processes (gloo), few steps: for tests")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launch/gpu-check", description=gpu_check.__doc__.split("\n")[0],
                                     epilog="Details: gtscale/bench/gpu_check.py and docs/speed.md.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if args.budget <= 0 or any(b < 1 for b in args.batch or ()):
            raise UserError("--budget and --batch must be positive")
        out = claim_empty(args.out)
        p = plan(args.cpu, args.compile, out, tuple(args.batch or ()))
    except UserError as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    return gpu_check.gpu_check(p, out, args.budget, args.config, args.shards, args.bench_models)


if __name__ == "__main__":
    sys.exit(main())
