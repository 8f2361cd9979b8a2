"""An anomaly score for every node of a graph store (`gtscale graph predict EXPORT --graph STORE
--out DIR`), from a node-task export (`gtscale export` of a run on data.graph), each node scored
with all of its neighbours by full-neighbourhood inference (train/full_inference.py: layer by layer over
the store's CSR, memory bounded by the chunk, not the graph).

Writes into DIR, which must be new, empty or an earlier output of this command:
    scores.npy     float32 [N]: node i's anomaly probability (the sigmoid of the head's logit)
    predict.json   what was scored: the export, the store (its manifest's sha256), nodes, seconds; written last
and, while it runs, the node states of every layer in DIR/.node-states-*/ (removed at the end).
"""

from __future__ import annotations

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


def score_graph(export: Path, graph: str, out: str, chunk_edges: int | None = None, progress: bool = True) -> tuple[Path, dict]:
    """Score every node of the store `graph` with the node-task export `export` into the folder
    `out` (SCORES, then RECORD); the folder and the record written."""
    if chunk_edges is not None and chunk_edges < 1:
        raise UserError(f"--chunk-edges must be >= 1, got {chunk_edges}")
    folder = claim_out_dir(out, MARKERS, [graph, export])
    store = GraphStore.open(graph)
    model = load_node_export(Path(export), store).to("cuda" if torch.cuda.is_available() else "cpu")
    began = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    logits = full_graph_logits(model, store, folder, chunk_edges, progress=progress)
    scores = outputs(logits, "node_bce")
    tmp = folder / f"{SCORES}.tmp.npy"
    np.save(tmp, scores)
    tmp.replace(folder / SCORES)
    record = {"format": RECORD_FORMAT, "export": str(Path(export).resolve()), "graph": str(store.path.resolve()),
              "graph_manifest_sha256": sha256_file(store.path / MANIFEST), "nodes": store.num_nodes, "inference": "full",
              "seconds": round(time.perf_counter() - began, 1)}
    atomic_write_text(folder / RECORD, json.dumps(record, indent=1))
    return folder, record
