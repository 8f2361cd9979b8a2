"""evaluator: binary — any number of 0/1 targets, each scored over its own labelled rows by OGB's
rules (ROC-AUC and AP averaged over the targets that hold both classes)."""

import numpy as np
import pytest
from ogb.graphproppred import Evaluator

from gtscale.train.config import TaskConfig
from gtscale.train.preflight import check_task
from gtscale.train.tasks import evaluate


def labels(rows: int, targets: int) -> tuple[np.ndarray, np.ndarray]:
    """(0/1 labels, NaN for 40 % of them, the second target's all 0: not scored; scores that rank them better than chance)."""
    rng = np.random.default_rng(0)
    y_true = (rng.random((rows, targets)) < 0.3).astype(np.float64)
    y_true[rng.random((rows, targets)) < 0.4] = np.nan
    if targets > 1:
        y_true[:, 1] = np.where(np.isnan(y_true[:, 1]), np.nan, 0.0)
    return y_true, rng.normal(size=(rows, targets)) + np.nan_to_num(y_true)


@pytest.mark.parametrize(("name", "metric"), [("ogbg-moltox21", "rocauc"), ("ogbg-molpcba", "ap"), ("ogbg-molhiv", "rocauc")])
def test_binary_scores_what_ogbs_evaluator_of_as_many_targets_does(name, metric):
    y_true, y_pred = labels(300, Evaluator(name).num_tasks)
    task = TaskConfig(loss="bce", metric=metric, evaluator="binary")
    expected = Evaluator(name).eval({"y_pred": y_pred, "y_true": y_true})[metric]
    assert evaluate(y_pred, y_true, task)[metric] == pytest.approx(expected, rel=1e-12)


def test_binary_fits_any_target_count_and_reports_rocauc_and_ap():
    check_task(TaskConfig(loss="bce", metric="rocauc", evaluator="binary"), num_targets=3)
    check_task(TaskConfig(loss="bce", metric="ap", evaluator="binary"), num_targets=1)
    with pytest.raises(Exception, match="does not suit metric"):
        check_task(TaskConfig(loss="mse", metric="rocauc", evaluator="binary"), num_targets=3)
    with pytest.raises(Exception, match="not reported by evaluator 'binary'"):
        check_task(TaskConfig(loss="bce", metric="rmse", evaluator="binary"), num_targets=3)
    assert evaluate(np.zeros((4, 1)), np.array([[0.0], [0.0], [np.nan], [0.0]]), TaskConfig(loss="bce", metric="rocauc", evaluator="binary")) == {}
