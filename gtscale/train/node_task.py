"""Node anomaly detection in the trainer: the loss at the target nodes, the metrics of the gathered
predictions and the features-only baseline (shards of `gtscale shard graph-ego`), behind the task
interface of tasks.py as `NodeTask`.

A node-task batch holds one ego subgraph per target; the model's node head scores every node and
`target_predictions` reads the scores at the target nodes. The loss is node_metrics.node_bce (ET
eq. 22) with ω = task.anomaly_weight, by default #normal / #anomalous of the train split's targets
(the manifest's task.label_counts, counted by the sharder).

Batches are dense `Batch`es of ego subgraphs (shards, or data.graph with sampler ego; targets at
positions `target_pos` of each graph) or `EdgeBatch`es of sampled subgraphs (data.graph with
sampler induced or fanout; targets at rows `target_rows`); both carry target_id / target_y /
target_y_mask, and `target_scores` reads either.

Threshold. Macro-F1 needs a decision threshold, which the papers choose on the validation nodes and
apply unchanged to the test nodes (node_metrics.evaluate_splits). The trainer evaluates the
validation split, choosing its threshold there (its Macro-F1 is that split's best over thresholds);
`gtscale evaluate RUN --split test` scores validation and test with the same checkpoint and applies
the validation threshold to test (`evaluate_nodes(..., threshold=t)`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import split_parts
from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.train.config import TaskConfig, TrainConfig
from gtscale.train.data_source import split_features
from gtscale.train.distributed_eval import target_predictions
from gtscale.train.node_metrics import choose_threshold, node_metrics
from gtscale.train.outputs import outputs
from gtscale.train.run_log import RunLog


def resolve_anomaly_weight(task: TaskConfig, manifest: dict, train_split: str) -> float:
    """ω of the weighted BCE: task.anomaly_weight, or with `auto` #normal / #anomalous of the train
    split's targets from the manifest (a UserError when that split lacks either class)."""
    if task.anomaly_weight != "auto":
        return float(task.anomaly_weight)
    recorded = manifest.get("task", {}).get("label_counts", {})
    missing = next((part for part in split_parts(train_split) if part not in recorded), None)
    if missing is not None:
        raise UserError(f"task.anomaly_weight: auto needs the manifest's task.label_counts.{missing}; set a number instead")
    counts = [recorded[part] for part in split_parts(train_split)]  # a union ("train+valid"): its parts' counts summed
    normal, anomalous = (sum(int(c.get(label, 0)) for c in counts) for label in ("normal", "anomalous"))
    if normal == 0 or anomalous == 0:
        raise UserError(f"task.anomaly_weight: auto needs both classes in split {train_split!r} ({normal} normal, {anomalous} anomalous); set a number instead")
    return normal / anomalous


def labelled_targets(batch: Batch) -> int:
    """Labelled target nodes of a batch: the count that weighs its loss in an optimizer step."""
    return int(batch.target_y_mask.sum())


def target_scores(batch: Batch | EdgeBatch, node_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(global target ids, logits at the target nodes) from the node head's [B, N, 1] (Batch: [B·T]
    rows) or [K, 1] (EdgeBatch: a model's node rows are its K target nodes' already)."""
    if isinstance(batch, EdgeBatch):
        if batch.target_rows is None or batch.target_id is None:
            raise ValueError("a node-task EdgeBatch needs target_rows (the scored rows) and target_id (their global node ids)")
        if node_scores.shape[0] != batch.target_rows.shape[0]:
            raise ValueError(f"{node_scores.shape[0]} node rows for an EdgeBatch of {batch.target_rows.shape[0]} target nodes")
        return batch.target_id, node_scores.reshape(-1).float()
    ids, values = target_predictions(batch, node_scores)
    return ids, values.reshape(-1).float()


def node_task_loss(batch: Batch, node_scores: torch.Tensor, pos_weight: float) -> torch.Tensor:
    """Mean weighted BCE over the batch's labelled targets (node_metrics.node_bce's value, masked by
    multiplication rather than indexing: no host synchronisation); 0 with a graph to the scores
    when no target is labelled."""
    _, logits = target_scores(batch, node_scores)
    weight = torch.tensor(pos_weight, dtype=torch.float32, device=logits.device)
    per_target = F.binary_cross_entropy_with_logits(logits, batch.target_y.reshape(-1).float(), pos_weight=weight, reduction="none")
    mask = batch.target_y_mask.reshape(-1).to(per_target.dtype)
    return (per_target * mask).sum() / mask.sum().clamp(min=1.0)


def evaluate_nodes(scores: np.ndarray, labels: np.ndarray, threshold: float | None = None) -> dict[str, float]:
    """AUROC, AUPRC, Macro-F1 and Rec@K of one split's labelled targets (labels NaN = unknown);
    Macro-F1 at `threshold`, or at the one chosen on this split itself when None (validation);
    {} without both classes."""
    known = ~np.isnan(labels)
    scores, labels = scores[known], labels[known].astype(np.int64)
    if labels.size == 0 or labels.min() == labels.max():
        return {}
    if threshold is None:
        threshold = choose_threshold(labels, scores)
    return node_metrics(labels, scores, threshold) | {"threshold": float(threshold)}


def validation_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """Macro-F1's decision threshold chosen on validation scores (labels NaN = unknown), to apply
    unchanged to the test split."""
    known = ~np.isnan(labels)
    labels = labels[known].astype(np.int64)
    if labels.size == 0 or labels.min() == labels.max():
        raise UserError("Macro-F1's threshold: the validation split needs labelled nodes of both classes")
    return choose_threshold(labels, scores[known])


def features_baseline(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """AUROC and AUPRC on the eval split's (features, labels) `test` of a logistic regression
    (scikit-learn; standardised features, balanced class weights) fit on the train split's `train`:
    what the node features alone achieve, without the graph (task.features_baseline: false skips it
    on huge graphs)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    (train_x, train_y), (test_x, test_y) = train, test
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, class_weight="balanced"))
    model.fit(train_x, train_y)
    scores = model.decision_function(test_x)
    return {"baseline_auroc": float(roc_auc_score(test_y, scores)), "baseline_auprc": float(average_precision_score(test_y, scores)),
            "baseline_train_nodes": int(train_y.size), "baseline_eval_nodes": int(test_y.size)}


class NodeTask:
    """Node anomaly detection (tasks.Task): targets at the target nodes (target_y, target_y_mask),
    weighted BCE with ω, one row per target node keyed by its global id; Macro-F1's threshold is
    calibrated on the validation split (data.eval_split)."""

    target_key = schema.TARGET_Y
    speed_in_nodes = True

    def __init__(self, cfg: TrainConfig, manifest: dict):
        self.cfg, self.manifest = cfg, manifest
        self.pos_weight = resolve_anomaly_weight(cfg.task, manifest, cfg.data.train_split)
        self.calibration_split = cfg.data.eval_split

    def labelled(self, batch: Batch | EdgeBatch) -> int:
        return labelled_targets(batch)

    def loss(self, batch: Batch | EdgeBatch, scores: torch.Tensor) -> torch.Tensor:
        return node_task_loss(batch, scores, self.pos_weight)

    def prediction_rows(self, batch: Batch | EdgeBatch, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keyed by global node id; padding targets and filler graphs carry FILLER_IDX."""
        ids, pred = target_scores(batch, scores)
        target = torch.where(batch.target_y_mask, batch.target_y.float(), torch.nan).reshape(-1)
        return ids, torch.stack([pred, target], dim=1)

    def target_totals(self, batch: Batch | EdgeBatch) -> None:
        return None  # no mean predictor for a classification

    def metrics(self, y_pred: np.ndarray, y_true: np.ndarray, calibration: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
        threshold = None if calibration is None else validation_threshold(calibration[0][:, 0], calibration[1][:, 0])
        return evaluate_nodes(y_pred[:, 0], y_true[:, 0], threshold)

    def outputs(self, y_pred: np.ndarray) -> np.ndarray:
        return outputs(y_pred, "node_bce")

    def log_start(self, log: RunLog, step: int) -> None:
        """ω, and the features-only baseline on the same train/eval targets."""
        data = self.cfg.data
        log.message(f"node task: weighted BCE with anomaly weight ω = {self.pos_weight:.4f}; Macro-F1's threshold is chosen on "
                    f"{data.eval_split!r} itself (`gtscale evaluate RUN --split test` applies the validation one to test)")
        if not self.cfg.task.features_baseline:
            return
        baseline = features_baseline(split_features(data, self.manifest, data.train_split), split_features(data, self.manifest, data.eval_split))
        log.metrics(step, "baseline", baseline)
        log.message(f"features-only logistic regression on {data.eval_split}: baseline_auroc {baseline['baseline_auroc']:.4f} baseline_auprc {baseline['baseline_auprc']:.4f}")
