"""Node anomaly detection: the loss and the metrics of the Energy Transformer / BWGNN / GADBench papers.

Loss. Weighted binary cross-entropy (ET eq. 22): L = −mean[ω·y·log σ(s) + (1−y)·log(1−σ(s))] with
ω = #normal / #anomalous training nodes (`anomaly_weight`), so the rare class weighs as much as
the common one in total; ω = 1 is plain BCE. torch's `pos_weight` is exactly this ω.

Metrics (scikit-learn computes them; all are "higher is better"):
- AUROC (`roc_auc_score`) and AUPRC (`average_precision_score`, GADBench's AUPRC);
- Macro-F1 at a decision threshold chosen on the **validation** nodes (the one maximising their
  Macro-F1, `choose_threshold`) and then applied unchanged to the test nodes, as BWGNN and ET
  report it. BWGNN scans 19 fixed thresholds; here every distinct score is a candidate (read off
  scikit-learn's `roc_curve`), so the validation optimum is exact;
- Rec@K (GADBench): the share of anomalies among the K highest scores, K = number of anomalies.
Scores may be logits or probabilities: every metric depends only on their order, and the
threshold is applied on the scale it was chosen on.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

#: Metric names of `node_metrics`; every one is better when higher (best checkpoint: max).
METRICS = ("auroc", "auprc", "macro_f1", "rec_at_k")


def anomaly_weight(labels: np.ndarray) -> float:
    """ω = #normal / #anomalous of 0/1 labels (unknown labels, −1 or NaN, are not counted)."""
    labels = np.asarray(labels, np.float64)
    anomalous, normal = int(np.sum(labels == 1)), int(np.sum(labels == 0))
    if anomalous == 0 or normal == 0:
        raise ValueError(f"anomaly weight needs both classes among the labels ({normal} normal, {anomalous} anomalous)")
    return normal / anomalous


def node_bce(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None, pos_weight: float = 1.0) -> torch.Tensor:
    """Mean (weighted) BCE of logits [K] against 0/1 labels [K] over the nodes where `mask` is True."""
    if mask is not None:
        logits, labels = logits[mask], labels[mask]
    weight = torch.tensor(pos_weight, dtype=torch.float32, device=logits.device)
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float(), pos_weight=weight)


def _check(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels, scores = np.asarray(labels).reshape(-1), np.asarray(scores, np.float64).reshape(-1)
    if labels.shape != scores.shape:
        raise ValueError(f"{labels.size} labels but {scores.size} scores")
    if not np.isin(labels, (0, 1)).all() or labels.min(initial=1) == labels.max(initial=0):
        raise ValueError("node metrics need 0/1 labels of both classes (drop unlabelled nodes first)")
    return labels.astype(np.int64), scores


def choose_threshold(labels: np.ndarray, scores: np.ndarray) -> float:
    """The threshold t maximising Macro-F1 of (scores ≥ t) on these (validation) nodes; the
    highest of tied thresholds wins (roc_curve lists them descending)."""
    from sklearn.metrics import roc_curve

    labels, scores = _check(labels, scores)
    fpr, tpr, thresholds = roc_curve(labels, scores, drop_intermediate=False)
    positives, negatives = labels.sum(), labels.size - labels.sum()
    tp, fp = tpr * positives, fpr * negatives
    fn, tn = positives - tp, negatives - fp
    f1_anomalous = 2 * tp / np.maximum(2 * tp + fp + fn, 1e-12)
    f1_normal = 2 * tn / np.maximum(2 * tn + fn + fp, 1e-12)
    best = int(np.argmax((f1_anomalous + f1_normal) / 2))
    threshold = float(thresholds[best])
    return threshold if np.isfinite(threshold) else float(np.nextafter(scores.max(), np.inf))  # "nothing is anomalous"


def recall_at_k(labels: np.ndarray, scores: np.ndarray, k: int | None = None) -> float:
    """Share of the anomalies found among the k highest scores (GADBench: k = number of anomalies);
    equal scores are ranked in node order."""
    labels, scores = _check(labels, scores)
    k = int(labels.sum()) if k is None else k
    top = np.argsort(-scores, kind="stable")[:k]
    return float(labels[top].sum() / labels.sum())


def node_metrics(labels: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    """AUROC, AUPRC, Macro-F1 of (scores ≥ threshold) and Rec@K of one split's nodes."""
    from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

    labels, scores = _check(labels, scores)
    return {
        "auroc": float(roc_auc_score(labels, scores)),
        "auprc": float(average_precision_score(labels, scores)),
        "macro_f1": float(f1_score(labels, scores >= threshold, average="macro", zero_division=0)),
        "rec_at_k": recall_at_k(labels, scores),
    }


def evaluate_splits(val: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]) -> dict[str, dict[str, float]]:
    """{"val": metrics, "test": metrics, "threshold": {"value": t}} with t chosen on (val labels, val scores)."""
    threshold = choose_threshold(*val)
    return {"val": node_metrics(*val, threshold), "test": node_metrics(*test, threshold), "threshold": {"value": threshold}}
