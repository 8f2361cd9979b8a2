"""`gtscale bench graph-sampling`: features-only, induced and fan-out training on neighbour-dependent labels
(bench/graph_sampling.py)."""

from __future__ import annotations

import argparse

from gtscale.bench.graph_sampling import bench_graph_sampling
from gtscale.graphs.synthetic import TSOCIAL_EDGES, TSOCIAL_NODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="an existing store to use (default: generate one into --workdir)")
    parser.add_argument("--nodes", type=int, default=TSOCIAL_NODES, help=f"generated graph: nodes (default T-Social's {TSOCIAL_NODES:,})")
    parser.add_argument("--edges", type=int, default=TSOCIAL_EDGES, help=f"generated graph: edges drawn (default T-Social's {TSOCIAL_EDGES:,})")
    parser.add_argument("--neighbour-signal", type=float, default=0.5, help="generated graph: the neighbours' share of the label score (default 0.5)")
    parser.add_argument("--anomaly-ratio", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0, help="graph, split, model and sampling seed")
    parser.add_argument("--model", default="et-tsocial", help="sparse ET model config (default et-tsocial)")
    parser.add_argument("--model-overrides", default="{}", help="YAML mapping over the model config, e.g. '{node_width: 32, num_heads: 2}'")
    parser.add_argument("--samplers", default="induced,fanout", help="comma-separated: induced, fanout")
    parser.add_argument("--fraction", type=float, default=0.05, help="induced: node fraction per subgraph")
    parser.add_argument("--fanouts", default="15,10", help="fanout: neighbours per node at each hop")
    parser.add_argument("--batch-targets", type=int, default=1024, help="fanout: targets per batch")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--train-cpu-seconds", type=float, default=300.0, help="training budget of each sampler, CPU seconds on one core")
    parser.add_argument("--eval-targets", type=int, default=50_000, help="random test nodes scored by sampled evaluation")
    parser.add_argument("--workdir", default=None, help="folder for the temporary folder of the generated store, weights and node states")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")


def run(args: argparse.Namespace) -> int:
    return bench_graph_sampling(store=args.store, nodes=args.nodes, edges=args.edges, neighbour_signal=args.neighbour_signal,
                                anomaly_ratio=args.anomaly_ratio, seed=args.seed, model=args.model, model_overrides=args.model_overrides,
                                samplers=args.samplers, fraction=args.fraction, fanouts=args.fanouts, batch_targets=args.batch_targets,
                                lr=args.lr, train_cpu_seconds=args.train_cpu_seconds, eval_targets=args.eval_targets, workdir=args.workdir,
                                json_path=args.json_path)
