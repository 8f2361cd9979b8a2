"""Score one split with a run's checkpoint (`gtscale evaluate RUN_DIR [--split test] [--tag best]`).

The trainer evaluates only data.eval_split while it trains; this is the separate step that scores
the best-validation checkpoint (or any tag) on another split afterwards, as the seed sweep does for
the test split. One process: DeepSpeed's ZeRO consolidation (`gtscale export`, into RUN_DIR/export)
gathers the weights, the run's resolved config (config.resolved.yaml) rebuilds the model, and the trainer's own task
(tasks.build_task) and prediction loop (tasks.predict) score the predictions. Writes RUN_DIR/eval/<split>-<tag>.json (metrics, tag, step)
and .npz (idx, y_pred, y_true by source idx), both atomically.

Node tasks (ego shards or data.graph): predictions are keyed by global node id, and Macro-F1's
decision threshold is chosen on the run's validation split (data.eval_split), scored with the same
checkpoint, then applied unchanged to the split asked for (the BWGNN / ET protocol); scoring the
validation split itself chooses it there. A graph store's nodes are scored as data.graph.inference
says (or --inference): in sampled batches like the trainer's evaluation, or with full-neighbourhood
inference over the whole store (train/full_inference.py), one pass that scores both splits; its
node states live under RUN_DIR/eval while it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from gtscale.errors import UserError
from gtscale.io import atomic_write_text
from gtscale.models.export import MODEL_FILE, read_weights
from gtscale.train.config import TrainConfig
from gtscale.train.data_source import split_loader, task_manifest
from gtscale.train.resolve import read_resolved
from gtscale.train.task_model import AUX_HEADS, build_task_model
from gtscale.train.tasks import Task, build_task, predict


def run_config(run_dir: Path) -> TrainConfig:
    """The TrainConfig a run trained with: resolved (target scaling as numbers, the model's loader
    keys), as its run directory records it (resolve.read_resolved)."""
    return read_resolved(run_dir).train


def predict_split(model: torch.nn.Module, task: Task, cfg: TrainConfig, manifest: dict, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx, y_pred, y_true with NaN where unlabelled) of every sample of `split`, sorted by idx
    (node tasks: one row per target node, idx its global id); `cfg` is resolved (data.loader holds
    the Batch fields the model reads)."""
    loader = split_loader(cfg.data, manifest, split, cfg.data.loader, train=False, rank=0, world_size=1)
    device = next(model.parameters()).device
    idx, y_pred, y_true = predict(task, model, loader, lambda batch: batch.to(device))
    if not len(idx):
        raise UserError(f"{manifest.get('_dir')}: split {split!r} has no samples")
    return idx, y_pred, y_true


def evaluate_run(run_dir: Path, split: str = "test", tag: str = "best", inference: str | None = None, progress: bool = False,
                 export_to: Path | None = None) -> dict:
    """Metrics of `split` under checkpoint `tag`; also written to RUN_DIR/eval/. `inference`
    (graph stores): sampled or full, default the run's data.graph.inference. The checkpoint's
    export, which the model is loaded from, goes to `export_to` (default RUN_DIR/export/<tag>)."""
    from gtscale.train.export import export, resolve_tag

    resolved = read_resolved(run_dir)
    cfg = resolved.train
    graph = cfg.data.graph
    inference = inference or (graph.inference if graph is not None else "sampled")
    if inference == "full" and graph is None:
        raise UserError(f"--inference full: scores the nodes of a graph store (data.graph); {run_dir} reads shards")
    manifest = task_manifest(cfg.data)
    if split not in manifest["splits"]:
        raise UserError(f"--split: {split!r} is not a split of {manifest['_dir']} (has {', '.join(manifest['splits'])})")
    tag = resolve_tag(run_dir, tag)
    out = export(run_dir, tag, export_to or run_dir / "export" / tag)
    task = build_task(cfg, manifest)
    model = build_task_model(resolved, manifest)
    missing, unexpected = model.load_state_dict(read_weights(out / MODEL_FILE), strict=False)
    missing = [k for k in missing if not k.startswith(AUX_HEADS)]  # not exported: training only
    if missing or unexpected:
        raise UserError(f"{out / MODEL_FILE}: does not fit the run's model ({(missing or unexpected)[0]})")
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    folder = run_dir / "eval"
    if inference == "full":
        from gtscale.graphs.store import GraphStore
        from gtscale.train.data_source import split_nodes
        from gtscale.train.full_inference import full_graph_logits, split_rows

        store = GraphStore.open(graph.store)
        logits = full_graph_logits(model, store, folder, progress=progress)
        nodes = split_nodes(graph)

        def rows(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return split_rows(logits, store, nodes[name])
    else:
        def rows(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return predict_split(model, task, cfg, manifest, name)
    idx, y_pred, y_true = rows(split)
    result = {"split": split, "tag": tag, "step": int(tag.rsplit("-", 1)[-1]), "samples": int(len(idx)), "export": str(out)}
    if graph is not None:
        result["inference"] = inference
    # Node tasks: Macro-F1 at the threshold chosen on the validation split, scored with the same model.
    calibration = None
    if task.calibration_split not in (None, split):
        calibration = rows(task.calibration_split)[1:]
    result["metrics"] = task.metrics(y_pred, y_true, calibration)
    if task.calibration_split is not None:
        result["threshold_split"] = task.calibration_split
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{split}-{tag}.tmp.npz"
    np.savez(tmp, idx=idx, y_pred=y_pred, y_true=y_true)
    tmp.replace(folder / f"{split}-{tag}.npz")
    atomic_write_text(folder / f"{split}-{tag}.json", json.dumps(result, indent=1))
    return result
