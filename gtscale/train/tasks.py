"""The task interface, and graph-level tasks behind it.

A task says which targets of a batch are labelled, their loss, the prediction rows evaluation
gathers, and the metrics of the gathered rows (`Task`). The trainer and `gtscale evaluate` hold one
(`build_task`) and know nothing else of the kind of task: graph tasks here (targets Batch.y,
one row per graph keyed by its source idx), node tasks in node_task.py (targets at the target
nodes, one row per target node keyed by its global id). `predict` is the one loop that turns a
split's batches into rows, on every rank of the trainer and in the single process of evaluate.

Graph tasks. Targets arrive as Batch.y with y_mask (False where unlabelled: MolPCBA's missing
labels, hidden test labels); losses average over labelled entries only. Metrics come from OGB's
own evaluators, or for any number of targets from the same rules over each target's labelled rows
(evaluators regression and binary).
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable, Optional, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import is_node_task
from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.train.config import TaskConfig, TrainConfig
from gtscale.train.distributed_eval import gather_predictions
from gtscale.train.node_task import NodeTask
from gtscale.train.outputs import outputs
from gtscale.train.run_log import RunLog

#: (y_pred [n, T], y_true [n, T]) of one split, NaN where unlabelled: what metrics are computed from.
Rows = tuple[np.ndarray, np.ndarray]


class Task(Protocol):
    """What the trainer and `gtscale evaluate` ask of a task."""

    #: The Batch field of its targets, which the loader must provide (y, or target_y at target nodes).
    target_key: str
    #: The split whose rows calibrate its metrics on another split (node tasks: Macro-F1's
    #: threshold, chosen on the validation split); None when metrics need no calibration.
    calibration_split: Optional[str]
    #: Whether its progress bar counts nodes/s rather than graphs/s (a node task's batch may be one
    #: induced subgraph of 289k nodes: 0.08 graphs/s says nothing).
    speed_in_nodes: bool

    def labelled(self, batch: Batch | EdgeBatch) -> int:
        """Labelled targets of the batch: what weighs its mean loss in an optimizer step."""

    def loss(self, batch: Batch | EdgeBatch, scores: torch.Tensor) -> torch.Tensor:
        """Mean loss over the batch's labelled targets; 0 (with a graph to the scores) when none is."""

    def prediction_rows(self, batch: Batch | EdgeBatch, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(key [n], [prediction ‖ target] [n, 2T]) rows of the batch (target NaN where unlabelled);
        rows keyed FILLER_IDX (filler graphs, padding targets) are dropped when gathered."""

    def target_totals(self, batch: Batch | EdgeBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(sum, count) [T] of the batch's labelled targets, for the mean predictor; None: not tracked."""

    def metrics(self, y_pred: np.ndarray, y_true: np.ndarray, calibration: Rows | None = None) -> dict[str, float]:
        """Metrics of one split's gathered rows; `calibration`: the rows of calibration_split
        (None: calibrate on these rows themselves, as while training)."""

    def outputs(self, y_pred: np.ndarray) -> np.ndarray:
        """What a user is given of gathered prediction rows (`outputs`)."""

    def log_start(self, log: RunLog, step: int) -> None:
        """What rank 0 reports once per job before training (node tasks: ω and a features-only baseline)."""


def build_task(cfg: TrainConfig, manifest: dict) -> Task:
    """The task of the shards' manifest (or a graph store's): node or graph targets."""
    return NodeTask(cfg, manifest) if is_node_task(manifest) else GraphTask(cfg.task)


@torch.no_grad()
def predict(task: Task, model: Callable, batches: Iterable, to_device: Callable, expected: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx, y_pred, y_true) of every sample of `batches`, sorted by idx, gathered over the ranks of
    the process group when there is one (every rank must then call it with as many batches: see
    distributed_eval.lockstep). `model(batch)[0]` are the task scores of a batch on its device.
    With `expected`, exactly that many samples must arrive (distributed_eval.gather_predictions)."""
    idx, rows = [], []
    for batch in batches:
        batch = to_device(batch)
        keys, values = task.prediction_rows(batch, model(batch)[0])
        idx.append(keys)
        rows.append(values)
    all_idx, all_rows = gather_predictions(idx, rows, expected=expected)
    t = all_rows.shape[1] // 2 if all_rows.dim() == 2 else 0
    return all_idx.numpy(), all_rows[:, :t].numpy(), all_rows[:, t:].numpy()


class GraphTask:
    """Graph-level regression or classification (Task): targets Batch.y, one row per graph."""

    target_key = schema.Y
    calibration_split = None
    speed_in_nodes = False

    def __init__(self, task: TaskConfig):
        self.task = task

    def labelled(self, batch: Batch) -> int:
        return int(batch.y_mask.sum())

    def loss(self, batch: Batch, scores: torch.Tensor) -> torch.Tensor:
        return task_loss(scores, batch.y, batch.y_mask, self.task)

    def prediction_rows(self, batch: Batch, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Targets NaN when the batch carries none (molecules read from SMILES to predict)."""
        values = predictions(scores, self.task)
        target = torch.full_like(values, torch.nan) if batch.y is None else torch.where(batch.y_mask, batch.y.float(), torch.nan)
        return batch.idx, torch.cat([values, target], dim=1)

    def target_totals(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        mask = batch.y_mask
        return torch.where(mask, batch.y, 0).double().sum(0), mask.double().sum(0)

    def metrics(self, y_pred: np.ndarray, y_true: np.ndarray, calibration: Rows | None = None) -> dict[str, float]:
        return evaluate(y_pred, y_true, self.task)

    def outputs(self, y_pred: np.ndarray) -> np.ndarray:
        return outputs(y_pred, self.task.loss)

    def log_start(self, log: RunLog, step: int) -> None:
        """Nothing to report: graph tasks have no weights or baselines of their own."""


def task_loss(scores: torch.Tensor, y: torch.Tensor, y_mask: torch.Tensor, task: TaskConfig) -> torch.Tensor:
    """Mean loss over labelled targets; 0 (with a graph to the scores) when nothing is labelled."""
    scores = scores.float()
    if task.loss == "bce":
        per_entry = F.binary_cross_entropy_with_logits(scores, y, reduction="none")
    else:
        target = (y - per_target(task.target_shift, y)) / per_target(task.target_scale, y)
        per_entry = (scores - target).abs() if task.loss == "l1" else (scores - target) ** 2
    mask = y_mask.to(per_entry.dtype)
    return (per_entry * mask).sum() / mask.sum().clamp(min=1.0)


def predictions(scores: torch.Tensor, task: TaskConfig) -> torch.Tensor:
    """What the evaluator scores: de-normalised values for regression, raw logits for binary tasks
    (ROC-AUC and AP only rank them)."""
    scores = scores.float()
    if task.loss == "bce":
        return scores
    return scores * per_target(task.target_scale, scores) + per_target(task.target_shift, scores)


def per_target(value: float | list[float], like: torch.Tensor) -> float | torch.Tensor:
    """A target_shift / target_scale that broadcasts over [B, T]: a number as is, a list (one per
    target, as auto resolves) as a tensor on `like`'s device, made once (a host→device copy per
    step would be one more synchronisation)."""
    if isinstance(value, (int, float)):
        return value
    return _constant(tuple(value), like.device, like.dtype)


@functools.lru_cache(maxsize=16)
def _constant(values: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def mean_absolute_error(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(y_pred - y_true)))


def root_mean_squared_error(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(y_pred - y_true))))


def multitarget_regression(y_pred: np.ndarray, y_true: np.ndarray) -> dict[str, float]:
    """MAE and RMSE of each target over its labelled rows, averaged over the targets that have any
    label, so that a sparsely labelled target counts as much as a dense one.

    NumPy, not scikit-learn: every training rank scores every evaluation, and importing
    sklearn.metrics (scipy with it) costs a rank about half a CPU-second for two formulas."""
    maes, rmses = [], []
    for t in range(y_true.shape[1]):
        labelled = ~np.isnan(y_true[:, t])
        if labelled.any():
            maes.append(mean_absolute_error(y_true[labelled, t], y_pred[labelled, t]))
            rmses.append(root_mean_squared_error(y_true[labelled, t], y_pred[labelled, t]))
    return {"mae": float(np.mean(maes)), "rmse": float(np.mean(rmses))} if maes else {}


def multitarget_binary(y_pred: np.ndarray, y_true: np.ndarray) -> dict[str, float]:
    """ROC-AUC and AP of each binary target over its labelled rows (scikit-learn), averaged over the
    targets whose labelled rows hold both classes (OGB's rule for ogbg-molhiv and -molpcba, for any
    number of targets); nothing when no target does."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    rocs, aps = [], []
    for t in range(y_true.shape[1]):
        labelled = ~np.isnan(y_true[:, t])
        if len(np.unique(y_true[labelled, t])) == 2:
            rocs.append(roc_auc_score(y_true[labelled, t], y_pred[labelled, t]))
            aps.append(average_precision_score(y_true[labelled, t], y_pred[labelled, t]))
    return {"rocauc": float(np.mean(rocs)), "ap": float(np.mean(aps))} if rocs else {}


def evaluate(y_pred: np.ndarray, y_true: np.ndarray, task: TaskConfig) -> dict[str, float]:
    """{metric: value} from OGB's evaluator on gathered predictions [n, T] and targets (NaN = unlabelled).

    pcqm4mv2 scores one target (preflight.check_task refuses more): OGB's PCQM4Mv2Evaluator gives the
    MAE, root_mean_squared_error the RMSE of the same labelled rows. An ogbg evaluator scores every column
    (ogbg-molesol, -molfreesolv, -mollipo report rmse; ogbg-molhiv rocauc; ogbg-molpcba ap);
    regression and binary score any number of targets (multitarget_regression, multitarget_binary)."""
    if task.evaluator == "pcqm4mv2":
        from ogb.lsc import PCQM4Mv2Evaluator

        if y_true.shape[1] != 1:  # never silently score column 0 of several
            raise ValueError(f"the pcqm4mv2 evaluator scores one target, got {y_true.shape[1]}")
        labelled = ~np.isnan(y_true[:, 0])
        if not labelled.any():
            return {}
        pred, true = y_pred[labelled, 0], y_true[labelled, 0]
        result = PCQM4Mv2Evaluator().eval({"y_pred": torch.from_numpy(pred), "y_true": torch.from_numpy(true)})
        return {"mae": float(result["mae"]), "rmse": root_mean_squared_error(true, pred)}
    if task.evaluator == "regression":
        return multitarget_regression(y_pred, y_true)
    if task.evaluator == "binary":
        return multitarget_binary(y_pred, y_true)
    from ogb.graphproppred import Evaluator

    try:
        evaluator = Evaluator(task.evaluator)
    except (KeyError, ValueError) as err:
        raise UserError(f"task.evaluator: {task.evaluator!r} is not an OGB graph property dataset") from err
    try:
        result = evaluator.eval({"y_pred": y_pred, "y_true": y_true})
    except RuntimeError:  # OGB's answer when no task has both classes (or any label) in this split: no metric
        return {}
    return {k: float(v) for k, v in result.items()}
