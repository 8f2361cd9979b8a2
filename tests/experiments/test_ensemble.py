"""The ensemble's prediction: the weighted mean of the members' outputs (values for regression,
probabilities for binary tasks) and their spread."""

import numpy as np
import pytest

from gtscale.errors import UserError
from gtscale.members.ensemble import ensemble, ensemble_weights
from gtscale.train.outputs import outputs


def test_regression_averages_values_and_binary_averages_probabilities():
    values = np.array([[[1.0], [np.nan]], [[3.0], [2.0]]])
    mean, std = ensemble(values)
    assert mean[0, 0] == 2.0 and std[0, 0] == 1.0 and np.isnan(mean[1, 0])
    logits = np.array([[[0.0]], [[np.log(3.0)]]])  # probabilities 0.5 and 0.75
    assert np.isclose(ensemble(outputs(logits, "bce"))[0][0, 0], 0.625)  # not sigmoid(mean logit) = 0.634


def test_weights_weigh_mean_and_spread():
    values = np.array([[[0.0]], [[4.0]]])
    mean, std = ensemble(values, [1, 3])
    assert mean[0, 0] == 3.0 and np.isclose(std[0, 0], np.sqrt(0.25 * 9 + 0.75 * 1))
    assert ensemble(values, [1e308, 1e308])[0][0, 0] == 2.0  # divided by the largest: no overflow to inf


@pytest.mark.parametrize("weights", [[1.0], [1.0, -1.0], [0.0, 0.0], [1.0, float("nan")]])
def test_bad_weights_are_refused(weights):
    with pytest.raises(UserError, match="--weights"):
        ensemble_weights(weights, 2)
