"""`gtscale evaluate RUN_DIR [--split test] [--tag best]`: score one split with a run's checkpoint.

The trainer evaluates only data.eval_split while it trains; this is the separate step that scores
the best-validation checkpoint (or any tag) on another split afterwards, as the seed sweep does for
the test split. One process: DeepSpeed's ZeRO consolidation (`gtscale export`, into RUN_DIR/export)
gathers the weights, the run's own config rebuilds the model, and the same tasks.evaluate that the
trainer uses scores the predictions. Writes RUN_DIR/eval/<split>-<tag>.json (metrics, tag, step)
and .npz (idx, y_pred, y_true by source idx), both atomically.

Node tasks (ego shards or data.graph): predictions are keyed by global node id, and Macro-F1's
decision threshold is chosen on the run's validation split (data.eval_split), scored with the same
checkpoint, then applied unchanged to the split asked for (the BWGNN / ET protocol); scoring the
validation split itself chooses it there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import yaml

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.io import atomic_write_text, safe_torch_load
from gtscale.train.config import RUN_RECORD_KEYS, TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory")
    parser.add_argument("--split", default="test", help="split of the run's shards to score (default test)")
    parser.add_argument("--tag", default="best", help="best (default: the best-validation checkpoint), latest, or a checkpoint tag")


def run_config(run_dir: Path) -> TrainConfig:
    """The TrainConfig a run was started with (its config.yaml, without the trainer's additions)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{run_dir}: not a run directory (no config.yaml)")
    raw = yaml.safe_load(path.read_text())
    raw = {k: v for k, v in raw.items() if k not in RUN_RECORD_KEYS}
    return from_dict(TrainConfig, raw)


@torch.no_grad()
def predict_split(model: torch.nn.Module, cfg: TrainConfig, manifest: dict, split: str, keys: list[str], path_dist: int,
                  node_task: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx, y_pred, y_true with NaN where unlabelled) of every sample of `split`, sorted by idx
    (node tasks: one row per target node, idx its global id)."""
    from gtscale.loader.batch import FILLER_IDX
    from gtscale.train.data_source import split_loader
    from gtscale.train.node_task import target_scores
    from gtscale.train.tasks import predictions

    loader_cfg = cfg.data.loader
    loader_cfg.keys, loader_cfg.path_edges_max_dist = keys, path_dist
    loader = split_loader(cfg.data, manifest, split, loader_cfg, train=False, rank=0, world_size=1)
    device = next(model.parameters()).device
    idx, pred, true = [], [], []
    for batch in loader:
        batch = batch.to(device)
        scores = model(batch)[0]
        if node_task:
            ids, values = target_scores(batch, scores)
            label = torch.where(batch.target_y_mask, batch.target_y.float(), torch.nan).reshape(-1)
            keep = ids != FILLER_IDX  # padding targets
            idx.append(ids[keep].cpu())
            pred.append(values[keep, None].cpu())
            true.append(label[keep, None].cpu())
            continue
        idx.append(batch.idx.cpu())
        pred.append(predictions(scores, cfg.task).cpu())
        true.append(torch.where(batch.y_mask, batch.y.float(), torch.nan).cpu())
    if not idx:
        raise UserError(f"{manifest.get('_dir')}: split {split!r} has no samples")
    all_idx = torch.cat(idx)
    order = torch.argsort(all_idx)
    return all_idx[order].numpy(), torch.cat(pred)[order].numpy(), torch.cat(true)[order].numpy()


def evaluate_run(run_dir: Path, split: str = "test", tag: str = "best") -> dict:
    """Metrics of `split` under checkpoint `tag`; also written to RUN_DIR/eval/."""
    from gtscale.train.data_source import task_manifest
    from gtscale.train.export import export, resolve_tag
    from gtscale.train.task_model import build_task_model, is_node_task, loader_keys

    cfg = run_config(run_dir)
    manifest = task_manifest(cfg.data)
    if split not in manifest["splits"]:
        raise UserError(f"--split: {split!r} is not a split of {manifest['_dir']} (has {', '.join(manifest['splits'])})")
    tag = resolve_tag(run_dir, tag)
    out = export(run_dir, tag, run_dir / "export" / tag)
    node_task = is_node_task(manifest)
    model, model_cfg = build_task_model(cfg, int(manifest["task"]["num_targets"]), manifest)
    missing, unexpected = model.load_state_dict(safe_torch_load(out / "model.pt"), strict=False)
    missing = [k for k in missing if not k.startswith("distance_head.")]  # not exported: training only
    if missing or unexpected:
        raise UserError(f"{out / 'model.pt'}: does not fit the run's model ({(missing or unexpected)[0]})")
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    keys, path_dist = loader_keys(model.backbone, model_cfg, node_task)
    idx, y_pred, y_true = predict_split(model, cfg, manifest, split, keys, path_dist, node_task)
    result = {"split": split, "tag": tag, "step": int(tag.rsplit("-", 1)[-1]), "samples": int(len(idx))}
    if node_task:
        result |= node_result(model, cfg, manifest, split, keys, path_dist, y_pred, y_true)
    else:
        from gtscale.train.tasks import evaluate

        result["metrics"] = evaluate(y_pred, y_true, cfg.task)
    folder = run_dir / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{split}-{tag}.tmp.npz"
    np.savez(tmp, idx=idx, y_pred=y_pred, y_true=y_true)
    tmp.replace(folder / f"{split}-{tag}.npz")
    atomic_write_text(folder / f"{split}-{tag}.json", json.dumps(result, indent=1))
    return result


def node_result(model, cfg: TrainConfig, manifest: dict, split: str, keys: list[str], path_dist: int,
                y_pred: np.ndarray, y_true: np.ndarray) -> dict:
    """{"metrics", "threshold_split"}: node metrics of `split`, Macro-F1 at the threshold chosen on
    the run's validation split (data.eval_split) with the same model."""
    from gtscale.train.node_task import evaluate_nodes, validation_threshold

    val_split = cfg.data.eval_split
    threshold = None
    if split != val_split:
        _, val_pred, val_true = predict_split(model, cfg, manifest, val_split, keys, path_dist, node_task=True)
        threshold = validation_threshold(val_pred[:, 0], val_true[:, 0])
    return {"metrics": evaluate_nodes(y_pred[:, 0], y_true[:, 0], threshold), "threshold_split": val_split}


def run(args: argparse.Namespace) -> int:
    result = evaluate_run(Path(args.run_dir), args.split, args.tag)
    print(f"{args.run_dir} {result['split']} at {result['tag']}: " + " ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items()))
    return 0
