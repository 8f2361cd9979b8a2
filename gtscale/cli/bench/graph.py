"""`gtscale bench graph`: huge-graph CSR build, store open, ego/induced sampling vs scipy + Python BFS (bench/graph.py)."""

from __future__ import annotations

import argparse

from gtscale.bench.graph import bench_graph
from gtscale.graphs.synthetic import TSOCIAL_EDGES, TSOCIAL_NODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=TSOCIAL_NODES, help=f"nodes of the generated graph (default T-Social's {TSOCIAL_NODES:,})")
    parser.add_argument("--edges", type=int, default=TSOCIAL_EDGES, help=f"edges drawn (default T-Social's {TSOCIAL_EDGES:,})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fanouts", default="16,16", help="per-hop fan-out caps of the ego sampler")
    parser.add_argument("--max-nodes", type=int, default=64, help="node cap of an ego subgraph")
    parser.add_argument("--svd-rank", type=int, default=8)
    parser.add_argument("--ego-targets", type=int, default=4000, help="ego subgraphs timed (gtscale)")
    parser.add_argument("--baseline-targets", type=int, default=100, help="ego subgraphs timed (scipy + Python BFS)")
    parser.add_argument("--shard-targets", type=int, default=2000, help="ego records written to a shard (timed)")
    parser.add_argument("--fraction", type=float, default=0.05, help="node fraction of the induced subgraph")
    parser.add_argument("--workdir", help="where the generated graph and store go (default: a temporary folder)")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")


def run(args: argparse.Namespace) -> int:
    return bench_graph(nodes=args.nodes, edges=args.edges, seed=args.seed, fanouts=args.fanouts, max_nodes=args.max_nodes, svd_rank=args.svd_rank,
                       ego_targets=args.ego_targets, baseline_targets=args.baseline_targets, shard_targets=args.shard_targets,
                       fraction=args.fraction, workdir=args.workdir, json_path=args.json_path)
