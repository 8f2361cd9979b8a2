"""`gtscale inspect PATH [--verify]`: what a shard directory holds, and whether it is intact (format/inspect.py)."""

from __future__ import annotations

import argparse

from gtscale.format.inspect import inspect_shards


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="shard directory (or its manifest.json)")
    parser.add_argument("--verify", action="store_true", help="check every shard's sha256 and sample count")
    parser.add_argument("--split", default=None, help="split whose first record is shown (default: the first)")


def run(args: argparse.Namespace) -> int:
    return inspect_shards(args.path, verify_all=args.verify, split=args.split)
