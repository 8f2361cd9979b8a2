"""Fixtures of the checkpoint-import tests: the model tests' random graphs and batch builder."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))

from model_fixtures import make_batch, random_graph  # noqa: E402


@pytest.fixture
def batch():
    """Five graphs (disconnected and single-node ones among them), padded to 13 nodes."""
    rng = np.random.default_rng(0)
    graphs = [random_graph(rng, 7), random_graph(rng, 9, components=2), random_graph(rng, 1),
              random_graph(rng, 6, components=3), random_graph(rng, 11)]
    return make_batch(graphs, pad_to=13)
