"""Batchers: budgets hold, nothing is lost or duplicated, geometric buckets bound the padding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtscale.loader.bucketing import Batcher, geometric_boundaries, padding_efficiency

SIZES = st.lists(st.integers(1, 60), min_size=1, max_size=400)


def _run(batcher: Batcher, sizes: list[int]) -> list[list[int]]:
    """Batches of item ids; ids index `sizes`."""
    return list(batcher.batches(((i, n) for i, n in enumerate(sizes)), flush=True))


@settings(max_examples=100, deadline=None)
@given(SIZES, st.integers(1, 500), st.sampled_from([0, 2000]), st.floats(1.01, 1.5))
def test_node_budget_batches_respect_the_budget_and_keep_every_graph(sizes, budget, pair_budget, ratio):
    batches = _run(Batcher(node_budget=budget, pair_budget=pair_budget, boundaries=geometric_boundaries(ratio)), sizes)
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))
    for batch in batches:
        n_max = max(sizes[i] for i in batch)
        over = len(batch) * n_max > budget or (pair_budget and len(batch) * n_max**2 > pair_budget)
        assert not over or len(batch) == 1, "only a graph too large on its own may exceed the budget"


@settings(max_examples=100, deadline=None)
@given(SIZES, st.floats(1.01, 1.5))
def test_every_geometric_bucket_batch_is_at_least_one_over_ratio_squared_efficient(sizes, ratio):
    batches = _run(Batcher(node_budget=10_000, boundaries=geometric_boundaries(ratio)), sizes)
    for batch in batches:
        assert padding_efficiency([[sizes[i] for i in batch]]) >= 1 / ratio**2 - 1e-12


@given(SIZES, st.integers(1, 50))
def test_fixed_count_batches(sizes, count):
    batches = _run(Batcher(max_graphs=count), sizes)
    assert [i for b in batches for i in b] == list(range(len(sizes))), "no bucketing: stream order"
    assert all(len(b) == count for b in batches[:-1]) and 0 < len(batches[-1]) <= count


def test_bucketing_beats_stream_order_on_mixed_sizes():
    sizes = [(7 * i) % 50 + 1 for i in range(3000)]
    plain = _run(Batcher(node_budget=1024), sizes)
    bucketed = _run(Batcher(node_budget=1024, boundaries=geometric_boundaries(1.05)), sizes)
    assert padding_efficiency([[sizes[i] for i in b] for b in bucketed]) > 0.95
    assert padding_efficiency([[sizes[i] for i in b] for b in plain]) < 0.6


def test_batches_close_as_soon_as_they_are_full():
    batcher = Batcher(node_budget=30, boundaries=[100])
    assert batcher.add("a", 10) == [] and batcher.add("b", 10) == []
    assert batcher.add("c", 10) == [["a", "b", "c"]]  # 3 x 10 = 30: no fourth graph can fit
    assert batcher.add("huge", 40) == [["huge"]]  # over budget alone: a batch of its own, not dropped
    assert batcher.flush() == []


def test_invalid_batchers_are_rejected():
    with pytest.raises(ValueError):
        Batcher(max_graphs=4, node_budget=100)
    with pytest.raises(ValueError):
        Batcher(node_budget=100, boundaries=[5, 5])
