"""The ensemble's prediction: mean values for regression, mean probabilities for binary tasks."""

import numpy as np

from gtscale.experiments.ensemble import mean_prediction


def test_regression_averages_values_and_binary_averages_probabilities():
    values = np.array([[[1.0], [np.nan]], [[3.0], [2.0]]])
    out = mean_prediction(values, "mse")
    assert out[0, 0] == 2.0 and np.isnan(out[1, 0])
    logits = np.array([[[0.0]], [[np.log(3.0)]]])  # probabilities 0.5 and 0.75
    assert np.isclose(mean_prediction(logits, "bce")[0, 0], 0.625)  # not sigmoid(mean logit) = 0.634
