"""Losses and evaluation of graph-level tasks. Metrics come from OGB's own evaluators.

Targets arrive as Batch.y with y_mask (False where unlabelled: MolPCBA's missing labels, hidden
test labels); losses average over labelled entries only.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from gtscale.errors import UserError
from gtscale.train.config import TaskConfig


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


def multitarget_regression(y_pred: np.ndarray, y_true: np.ndarray) -> dict[str, float]:
    """MAE and RMSE of each target over its labelled rows (scikit-learn), averaged over the targets
    that have any label, so that a sparsely labelled target counts as much as a dense one."""
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    maes, rmses = [], []
    for t in range(y_true.shape[1]):
        labelled = ~np.isnan(y_true[:, t])
        if labelled.any():
            maes.append(mean_absolute_error(y_true[labelled, t], y_pred[labelled, t]))
            rmses.append(root_mean_squared_error(y_true[labelled, t], y_pred[labelled, t]))
    return {"mae": float(np.mean(maes)), "rmse": float(np.mean(rmses))} if maes else {}


def evaluate(y_pred: np.ndarray, y_true: np.ndarray, task: TaskConfig) -> dict[str, float]:
    """{metric: value} from OGB's evaluator on gathered predictions [n, T] and targets (NaN = unlabelled).

    pcqm4mv2 scores one target (config.check_task refuses more): OGB's PCQM4Mv2Evaluator gives the
    MAE, scikit-learn the RMSE of the same labelled rows. An ogbg evaluator scores every column
    (ogbg-molesol, -molfreesolv, -mollipo report rmse; ogbg-molhiv rocauc; ogbg-molpcba ap)."""
    if task.evaluator == "pcqm4mv2":
        from ogb.lsc import PCQM4Mv2Evaluator
        from sklearn.metrics import root_mean_squared_error

        if y_true.shape[1] != 1:  # never silently score column 0 of several
            raise ValueError(f"the pcqm4mv2 evaluator scores one target, got {y_true.shape[1]}")
        labelled = ~np.isnan(y_true[:, 0])
        if not labelled.any():
            return {}
        pred, true = y_pred[labelled, 0], y_true[labelled, 0]
        result = PCQM4Mv2Evaluator().eval({"y_pred": torch.from_numpy(pred), "y_true": torch.from_numpy(true)})
        return {"mae": float(result["mae"]), "rmse": float(root_mean_squared_error(true, pred))}
    if task.evaluator == "regression":
        return multitarget_regression(y_pred, y_true)
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
