"""evaluator: regression — any number of targets, each scored over its own labelled rows."""

import subprocess
import sys

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, root_mean_squared_error

from gtscale.train.config import TaskConfig
from gtscale.train.preflight import check_task
from gtscale.train.tasks import evaluate


def test_each_target_is_scored_over_its_labelled_rows_then_averaged():
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    y_true[rng.random((50, 3)) < 0.3] = np.nan
    y_true[:, 2] = np.nan
    y_true[:2, 2] = [1.0, 2.0]  # a sparse target counts as much as a dense one
    task = TaskConfig(loss="mse", metric="rmse", evaluator="regression")
    metrics = evaluate(y_pred, y_true, task)
    cols = [~np.isnan(y_true[:, t]) for t in range(3)]
    assert metrics["mae"] == pytest.approx(np.mean([mean_absolute_error(y_true[c, t], y_pred[c, t]) for t, c in enumerate(cols)]))
    assert metrics["rmse"] == pytest.approx(np.mean([root_mean_squared_error(y_true[c, t], y_pred[c, t]) for t, c in enumerate(cols)]))


def test_regression_fits_any_target_count_and_pcqm4mv2_only_one():
    check_task(TaskConfig(loss="mse", metric="mae", evaluator="regression"), num_targets=217)
    with pytest.raises(Exception, match="scores 1 target"):
        check_task(TaskConfig(loss="mse", metric="mae", evaluator="pcqm4mv2"), num_targets=217)


def test_a_training_rank_scores_regression_without_importing_scikit_learn():
    """Every rank scores every evaluation: the MAE and RMSE of the regression evaluators (pcqm4mv2's
    RMSE too) must not cost it scikit-learn's import (about half a CPU-second)."""
    script = (
        "import sys, numpy as np\n"
        "from gtscale.train.config import TaskConfig\n"
        "from gtscale.train.tasks import evaluate\n"
        "y = np.arange(6, dtype=np.float64).reshape(6, 1)\n"
        "for evaluator in ('pcqm4mv2', 'regression'):\n"
        "    assert evaluate(y + 1, y, TaskConfig(loss='l1', metric='mae', evaluator=evaluator)) == {'mae': 1.0, 'rmse': 1.0}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
