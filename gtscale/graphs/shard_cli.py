"""`gtscale shard graph-ego --graph STORE --out DIR …`: ego-subgraph shards of each split's targets."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gtscale.errors import UserError
from gtscale.graphs.shard_ego import EgoShardOptions, shard_graph_ego
from gtscale.graphs.splits import mask_split, ratio_split
from gtscale.graphs.store import GraphStore
from gtscale.prep.structure import StructureOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", required=True, help="graph store (gtscale graph build)")
    parser.add_argument("--out", required=True, help="shard folder")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--train-ratio", type=float, default=0.4, help="BWGNN/ET split: stratified training share, rest 1:2 val/test (default 0.4)")
    split.add_argument("--mask-column", type=int, default=None, help="use column K of the stored masks (GADBench) instead")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--fanouts", default="16,16", help="per-hop fan-out caps (default 16,16: two hops)")
    parser.add_argument("--max-nodes", type=int, default=64, help="node cap of an ego subgraph (default 64)")
    parser.add_argument("--sampler-seed", type=int, default=0)
    parser.add_argument("--svd-rank", type=int, default=8)
    parser.add_argument("--lap-k", type=int, default=0)
    parser.add_argument("--shard-size", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    try:
        fanouts = tuple(int(f) for f in args.fanouts.split(","))
    except ValueError as err:
        raise UserError(f"--fanouts {args.fanouts!r}: expected comma-separated integers") from err
    if not fanouts or min(fanouts) < 1 or not 1 <= args.max_nodes <= 65535 or args.shard_size < 1 or args.workers < 1:
        raise UserError("--fanouts must be ≥ 1 each, --max-nodes in 1..65535, --shard-size and --workers ≥ 1")
    store = GraphStore.open(args.graph)
    if args.mask_column is not None:
        splits, rule = mask_split(store.masks, args.mask_column, args.graph), {"mask_column": args.mask_column}
    else:
        splits = ratio_split(store.labels, args.train_ratio, args.split_seed)
        rule = {"train_ratio": args.train_ratio, "split_seed": args.split_seed}
    options = EgoShardOptions(StructureOptions(svd_rank=args.svd_rank, lap_k=args.lap_k), fanouts, args.max_nodes, args.sampler_seed, args.shard_size)
    manifest = shard_graph_ego(Path(args.graph), splits, rule, Path(args.out), options, min(args.workers, os.cpu_count() or 1), not args.no_progress)
    print(f"wrote {sum(s['samples'] for s in manifest['splits'].values())} ego records to {args.out} "
          + ", ".join(f"{k} {v['samples']}" for k, v in manifest["splits"].items()))
    return 0
