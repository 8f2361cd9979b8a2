"""`gtscale graph predict EXPORT --graph STORE --out DIR`: an anomaly score for every node of a graph
store, from a node-task export (`gtscale export` of a run on data.graph), each node scored with all
of its neighbours by full-neighbourhood inference (train/full_inference.py: layer by layer over
the store's CSR, memory bounded by the chunk, not the graph).

Writes into DIR, which must be new, empty or an earlier output of this command:
    scores.npy     float32 [N]: node i's anomaly probability (the sigmoid of the head's logit)
    predict.json   what was scored: the export, the store (its manifest's sha256), nodes, seconds; written last
and, while it runs, the node states of every layer in DIR/.node-states-*/ (removed at the end).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from gtscale.errors import UserError
from gtscale.graphs.store import MANIFEST, GraphStore
from gtscale.io import atomic_write_text, claim_out_dir, sha256_file
from gtscale.models.export import check_fits, read_export
from gtscale.train.outputs import outputs
from gtscale.train.full_inference import full_graph_logits

SCORES, RECORD = "scores.npy", "predict.json"
RECORD_FORMAT = "gtscale-node-scores"
#: What marks a folder as this command's output (gtscale.io.claim_out_dir).
MARKERS = {RECORD: lambda record: record.get("format") == RECORD_FORMAT}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export", help="a node-task export folder (model.pt, model.yaml, export.json) of a run on a graph store")
    parser.add_argument("--graph", required=True, help="the graph store to score (`gtscale graph build`)")
    parser.add_argument("--out", required=True, help="output folder: new, empty or an earlier `graph predict` output")
    parser.add_argument("--chunk-edges", type=int, default=None, help="neighbours per chunk (default: ~96 MiB of attention temporaries)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def load_node_export(path: Path, store: GraphStore) -> torch.nn.Module:
    """The export's backbone and node head, refused in one line unless it scores this store's nodes."""
    export = read_export(path)
    head = export.config.get("head", {})
    if head.get("kind") != "node" or int(head.get("num_outputs", 1)) != 1:
        raise UserError(f"{export.folder}: not a node-task export (its head is {head.get('kind', 'graph')!r} with "
                        f"{head.get('num_outputs', 1)} output(s)); `gtscale predict` scores molecules")
    width = int(export.config.get("node_float_dim") or 0)
    if width != store.manifest["num_features"]:
        raise UserError(f"{export.folder}: the model reads {width} node features, {store.path} has {store.manifest['num_features']}")
    return check_fits(export.state, export.config, str(export.folder / "model.pt"))


def run(args: argparse.Namespace) -> int:
    if args.chunk_edges is not None and args.chunk_edges < 1:
        raise UserError(f"--chunk-edges must be >= 1, got {args.chunk_edges}")
    out = claim_out_dir(args.out, MARKERS, [args.graph, args.export])
    store = GraphStore.open(args.graph)
    model = load_node_export(Path(args.export), store).to("cuda" if torch.cuda.is_available() else "cpu")
    began = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    logits = full_graph_logits(model, store, out, args.chunk_edges, progress=not args.no_progress)
    scores = outputs(logits, "node_bce")
    tmp = out / f"{SCORES}.tmp.npy"
    np.save(tmp, scores)
    tmp.replace(out / SCORES)
    record = {"format": RECORD_FORMAT, "export": str(Path(args.export).resolve()), "graph": str(store.path.resolve()),
              "graph_manifest_sha256": sha256_file(store.path / MANIFEST), "nodes": store.num_nodes, "inference": "full",
              "seconds": round(time.perf_counter() - began, 1)}
    atomic_write_text(out / RECORD, json.dumps(record, indent=1))
    print(f"wrote {out / SCORES}: the anomaly probability of each of {store.num_nodes:,} nodes ({record['seconds']} s)")
    return 0
