"""One prediction from several models of the same task (seeds of a sweep, arms of a table).

Regression: the mean of the models' values. Binary tasks (loss bce, predictions are logits): the
mean of their probabilities, chemprop's rule, returned as probabilities (ROC-AUC and AP, the
binary evaluators, only rank them).
"""

from __future__ import annotations

import numpy as np


def mean_prediction(predictions: np.ndarray, loss: str) -> np.ndarray:
    """[models, n, T] predictions → [n, T]; NaN where any model has none."""
    if loss == "bce":
        return (1.0 / (1.0 + np.exp(-predictions.astype(np.float64)))).mean(axis=0)
    return predictions.astype(np.float64).mean(axis=0)
