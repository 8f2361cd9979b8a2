"""`gtscale bench loader`: decode + collate graphs/s per worker and padding efficiency (bench/loader.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.bench.loader import bench_loader


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=Path, default=None, help="manifest folder to read (default: build NCI shards in a temp folder)")
    parser.add_argument("--split", default="train", help="split of --shards to read (default train)")
    parser.add_argument("--molecules", type=int, default=3000, help="molecules in the built shards (default 3000)")
    parser.add_argument("--shard-size", type=int, default=500, help="samples per built shard (default 500)")
    parser.add_argument("--node-budget", type=int, default=4096, help="padded nodes per bucketed batch (default 4096)")
    parser.add_argument("--max-dist", type=int, default=5, help="Graphormer path-edge hops D (default 5)")
    parser.add_argument("--seconds", type=float, default=2.0, help="least timed seconds per row (default 2)")
    parser.add_argument("--workers", type=int, default=0, help="also time the EGT bucketed row through this many DataLoader worker processes (default 0: in-process rows only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")


def run(args: argparse.Namespace) -> int:
    return bench_loader(shards=args.shards, split=args.split, molecules=args.molecules, shard_size=args.shard_size, node_budget=args.node_budget,
                        max_dist=args.max_dist, seconds=args.seconds, workers=args.workers, seed=args.seed, json_path=args.json)
