"""`gtscale graph predict EXPORT --graph STORE --out DIR`: an anomaly score for every node of a graph
store (train/graph_predict.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.train.graph_predict import SCORES, score_graph

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export", help="a node-task export folder (model.pt, model.yaml, export.json) of a run on a graph store")
    parser.add_argument("--graph", required=True, help="the graph store to score (`gtscale graph build`)")
    parser.add_argument("--out", required=True, help="output folder: new, empty or an earlier `graph predict` output")
    parser.add_argument("--chunk-edges", type=int, default=None, help="neighbours per chunk (default: ~96 MiB of attention temporaries)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    out, record = score_graph(Path(args.export), args.graph, args.out, args.chunk_edges, progress=not args.no_progress)
    print(f"wrote {out / SCORES}: the anomaly probability of each of {record['nodes']:,} nodes ({record['seconds']} s)")
    return 0
