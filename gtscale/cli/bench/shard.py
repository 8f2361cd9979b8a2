"""`gtscale bench shard`: featurization + structure + serialization throughput vs smiles2graph (bench/shard.py)."""

from __future__ import annotations

import argparse

from gtscale.bench.shard import bench_shard


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=6000, help="molecules per round (default 6000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")
    parser.add_argument("--whole-process", type=int, default=0, metavar="N",
                        help="time the whole `gtscale shard pcqm4mv2 --workers 1` process on N molecules against a smiles2graph process")
    parser.add_argument("--also-tree", action="append", default=[], metavar="DIR",
                        help="with --whole-process: also time `gtscale shard` from the gtscale checkout DIR (run in DIR, so that its package is imported), "
                        "in the same rounds: before/after figures of a change from one run")


def run(args: argparse.Namespace) -> int:
    return bench_shard(limit=args.limit, rounds=args.rounds, json_path=args.json_path, whole_process=args.whole_process, also_tree=args.also_tree)
