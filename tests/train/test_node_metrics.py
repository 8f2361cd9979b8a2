"""Node-task metrics equal scikit-learn's on the same predictions and hand-checked cases; the
threshold is the validation optimum of Macro-F1; the weighted BCE is ET eq. 22."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from gtscale.train.node_metrics import anomaly_weight, choose_threshold, evaluate_splits, node_bce, node_metrics, recall_at_k


def _predictions(seed: int, n: int = 400, ties: bool = False):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.1).astype(np.int64)
    scores = rng.standard_normal(n) + 1.2 * labels
    return labels, (np.round(scores, 1) if ties else scores)


@pytest.mark.parametrize("ties", [False, True])
def test_metrics_equal_scikit_learn(ties):
    labels, scores = _predictions(0, ties=ties)
    metrics = node_metrics(labels, scores, threshold=0.3)
    assert metrics["auroc"] == roc_auc_score(labels, scores)
    assert metrics["auprc"] == average_precision_score(labels, scores)
    assert metrics["macro_f1"] == f1_score(labels, scores >= 0.3, average="macro")


@pytest.mark.parametrize("ties", [False, True])
def test_threshold_is_the_validation_optimum_of_macro_f1(ties):
    labels, scores = _predictions(1, ties=ties)
    best = choose_threshold(labels, scores)
    brute = max(f1_score(labels, scores >= t, average="macro") for t in np.unique(scores))
    assert math.isclose(f1_score(labels, scores >= best, average="macro"), brute, rel_tol=1e-12)


def test_threshold_chosen_on_validation_is_applied_to_test():
    val, test = _predictions(2), _predictions(3)
    out = evaluate_splits(val, test)
    t = out["threshold"]["value"]
    assert t == choose_threshold(*val)
    assert out["test"]["macro_f1"] == f1_score(test[0], test[1] >= t, average="macro")
    assert out["val"] == node_metrics(*val, t)


def test_hand_checked_cases():
    labels = np.array([0, 1, 0, 1, 0, 0])
    scores = np.array([0.1, 0.9, 0.8, 0.3, 0.2, 0.0])
    # K = 2 anomalies; the two highest scores are nodes 1 (anomalous) and 2 (normal): Rec@K = 1/2
    assert recall_at_k(labels, scores) == 0.5
    assert recall_at_k(labels, scores, k=4) == 1.0
    # thresholds 0.3 (predict {1, 2, 3}: F1 anomalous 0.8, normal 6/7) beats 0.9 (predict {1}: 2/3, 0.8889)
    assert choose_threshold(labels, scores) == 0.3
    assert math.isclose(node_metrics(labels, scores, 0.3)["macro_f1"], (0.8 + 6 / 7) / 2)
    # perfectly separated: any threshold between the classes gives Macro-F1 1
    assert node_metrics(np.array([0, 0, 1]), np.array([0.1, 0.2, 0.7]), choose_threshold(np.array([0, 0, 1]), np.array([0.1, 0.2, 0.7])))["macro_f1"] == 1.0
    with pytest.raises(ValueError, match="both classes"):
        node_metrics(np.zeros(3), np.arange(3.0), 0.5)


def test_weighted_bce_is_et_equation_22():
    labels = np.array([0, 0, 0, 1, -1, 0, 1, 0])
    assert anomaly_weight(labels) == 5 / 2  # the unknown label (−1) is not counted
    logits = torch.tensor([0.3, -1.0, 2.0, 0.5, 4.0])
    y = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0])
    mask = torch.tensor([True, True, True, True, False])
    p = torch.sigmoid(logits[:4])
    by_hand = -(2.5 * y[:4] * torch.log(p) + (1 - y[:4]) * torch.log(1 - p)).mean()
    torch.testing.assert_close(node_bce(logits, y, mask, pos_weight=2.5), by_hand)
    plain = -(y[:4] * torch.log(p) + (1 - y[:4]) * torch.log(1 - p)).mean()
    torch.testing.assert_close(node_bce(logits, y, mask), plain)


def test_a_given_threshold_is_applied_unchanged():
    """The val → test protocol in the trainer's terms (node_task.evaluate_nodes): Macro-F1 at the
    validation threshold, not at the evaluated split's own optimum; unknown labels (NaN) dropped."""
    from gtscale.errors import UserError
    from gtscale.train.node_task import evaluate_nodes, validation_threshold

    labels = np.array([0, 1, 0, 1, 0, 0, np.nan])
    scores = np.array([0.1, 0.9, 0.8, 0.3, 0.2, 0.0, 5.0])
    assert evaluate_nodes(scores, labels)["threshold"] == 0.3  # its own optimum (hand-checked above)
    applied = evaluate_nodes(scores, labels, threshold=0.9)
    assert applied["threshold"] == 0.9 and math.isclose(applied["macro_f1"], (2 / 3 + 8 / 9) / 2)
    assert validation_threshold(scores, labels) == 0.3
    with pytest.raises(UserError, match="both classes"):
        validation_threshold(scores[:3], np.array([0.0, 0.0, np.nan]))
