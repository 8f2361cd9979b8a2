"""Fixtures of the model tests; the graph and batch builders live in model_fixtures.py."""

from __future__ import annotations

import numpy as np
import pytest

from model_fixtures import random_graph


@pytest.fixture
def graphs() -> list[dict]:
    """Five graphs: connected, two components, a single node, three components, connected."""
    rng = np.random.default_rng(0)
    return [
        random_graph(rng, 7),
        random_graph(rng, 9, components=2),
        random_graph(rng, 1),
        random_graph(rng, 6, components=3),
        random_graph(rng, 11),
    ]
