"""`gtscale bench train`: training-loop graphs/s against the model alone on pre-collated batches (bench/train.py)."""

from __future__ import annotations

import argparse

from gtscale.bench.train import bench_train


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="configs/tasks/nci-tpsa.yaml", help="training YAML (default: the quickstart's)")
    parser.add_argument("--shards", default=None, help="shard folder (default: shard nci-tpsa into a temporary folder)")
    parser.add_argument("--steps", type=int, default=40, help="steps per round and mode (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--workers", type=int, default=1, help="loader workers (default 1)")
    parser.add_argument("overrides", nargs="*", help="dotted.key=value replacements of the training config")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")


def run(args: argparse.Namespace) -> int:
    return bench_train(config=args.config, shards=args.shards, steps=args.steps, rounds=args.rounds, workers=args.workers,
                       overrides=args.overrides, json_path=args.json_path)
