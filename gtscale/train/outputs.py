"""What a user is given of a task's evaluated predictions (Task.outputs).

Metrics read the evaluator's rows (tasks.predictions: a regression's values in the targets' units,
a binary task's logits, which rank the same as probabilities without saturating at 1.0 in float32).
Every path that hands predictions out (predict, the sweep, fit and table ensembles, graph predict)
turns those rows into outputs here.
"""

from __future__ import annotations

import numpy as np

#: Losses whose scores are logits: their outputs are probabilities.
BINARY_LOSSES = ("bce", "node_bce")


def outputs(y_pred: np.ndarray, loss: str, dtype: type = np.float32) -> np.ndarray:
    """Probabilities (the sigmoid of the logits) of a binary task; a regression's values as they are.
    float32 as they are handed out; float64 (`dtype`) where they are only compared (an SVC's
    out-of-fold probabilities, which choose a fit's model)."""
    if loss in BINARY_LOSSES:
        return (1.0 / (1.0 + np.exp(-np.asarray(y_pred, np.float64)))).astype(dtype)
    return np.asarray(y_pred, dtype)
