"""`gtscale shard graph-ego --graph STORE --out DIR …`: ego-subgraph shards of each split's targets
(graphs/shard_ego.py)."""

from __future__ import annotations

import argparse

from gtscale.graphs.shard_ego import shard_store_ego

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
    manifest = shard_store_ego(args.graph, args.out, fanouts=args.fanouts, max_nodes=args.max_nodes, train_ratio=args.train_ratio,
                               mask_column=args.mask_column, split_seed=args.split_seed, sampler_seed=args.sampler_seed,
                               svd_rank=args.svd_rank, lap_k=args.lap_k, shard_size=args.shard_size, workers=args.workers,
                               progress=not args.no_progress)
    print(f"wrote {sum(s['samples'] for s in manifest['splits'].values())} ego records to {args.out} "
          + ", ".join(f"{k} {v['samples']}" for k, v in manifest["splits"].items()))
    return 0
