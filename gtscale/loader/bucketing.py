"""Streaming batchers: which graphs share a batch.

A dense batch is padded to its largest graph, so it costs B × N_max node slots and
B × N_max² node pairs (attention, distance and edge tensors). *Padding efficiency* is the share
of those pairs that belong to real graphs, Σ n_i² / (B · N_max²) summed over batches.

`Batcher` keeps one open batch per size bucket and closes it when the next graph would break the
budget: a node budget (B · N_max ≤ node_budget), optionally a pair budget (B · N_max² ≤
pair_budget), or a graph count. With geometric buckets [lo, hi) where hi − 1 ≤ lo · ratio, every
batch is at least 1/ratio² efficient, whatever the size distribution (0.907 for ratio 1.05).
A graph larger than the budget on its own is a batch of one: it is never dropped.
"""

from __future__ import annotations

import bisect
import math
from typing import Generic, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")


def geometric_boundaries(ratio: float, max_nodes: int = 1 << 16) -> list[int]:
    """Bucket upper bounds (exclusive) [2, ...]: bucket [lo, hi) with hi = max(lo + 1, ⌊lo·ratio⌋ + 1)."""
    bounds, lo = [], 1
    while lo <= max_nodes:
        hi = max(lo + 1, math.floor(lo * ratio) + 1)
        bounds.append(hi)
        lo = hi
    return bounds


class Batcher(Generic[T]):
    """Groups a stream of (item, num_nodes) into batches; deterministic for a given input order.

    Exactly one of `max_graphs` or `node_budget` is > 0. `boundaries` (ascending, exclusive upper
    bounds) enable bucketing; None puts every graph in one bucket (stream order). `pad_to_bucket`:
    the budget counts every graph at its bucket's largest size (see LoaderConfig.pad_to_bucket)."""

    def __init__(self, *, max_graphs: int = 0, node_budget: int = 0, pair_budget: int = 0, boundaries: Sequence[int] | None = None,
                 pad_to_bucket: bool = False):
        if (max_graphs > 0) == (node_budget > 0):
            raise ValueError("give exactly one of max_graphs and node_budget")
        self.max_graphs, self.node_budget, self.pair_budget = max_graphs, node_budget, pair_budget
        self.boundaries = list(boundaries) if boundaries is not None else []
        if any(b <= a for a, b in zip(self.boundaries, self.boundaries[1:])):
            raise ValueError("bucket boundaries must be strictly ascending")
        # Batches padded to their bucket's largest size cost that size whatever their graphs:
        # the budget counts it, so that a bucket's batches never exceed one padded shape.
        self.pad_to_bucket = pad_to_bucket
        self._open: dict[int, tuple[list[T], int]] = {}  # bucket → (items, max nodes)

    def _fits(self, count: int, max_graph_nodes: int) -> bool:
        if self.max_graphs:
            return count <= self.max_graphs
        if count * max_graph_nodes > self.node_budget:
            return False
        return not self.pair_budget or count * max_graph_nodes * max_graph_nodes <= self.pair_budget

    def add(self, item: T, num_nodes: int) -> list[list[T]]:
        """Add one graph; returns the batches this closes (none, one, or two when a graph that
        overflows the budget on its own closes the open batch and then itself)."""
        bucket = bisect.bisect_right(self.boundaries, num_nodes)
        if self.pad_to_bucket and bucket < len(self.boundaries):
            num_nodes = self.boundaries[bucket] - 1
        items, max_graph_nodes = self._open.pop(bucket, ([], 0))
        closed = []
        if items and not self._fits(len(items) + 1, max(max_graph_nodes, num_nodes)):
            closed.append(items)
            items, max_graph_nodes = [], 0
        items.append(item)
        max_graph_nodes = max(max_graph_nodes, num_nodes)
        if not self._fits(len(items) + 1, max_graph_nodes):  # full: no further graph of <= max_graph_nodes fits
            closed.append(items)
        else:
            self._open[bucket] = (items, max_graph_nodes)
        return closed

    def flush(self) -> list[list[T]]:
        """The open (partial) batches, smallest bucket first; the batcher is empty afterwards."""
        out = [self._open[b][0] for b in sorted(self._open)]
        self._open.clear()
        return out

    def batches(self, stream: Iterable[tuple[T, int]], flush: bool = True) -> Iterator[list[T]]:
        for item, num_nodes in stream:
            yield from self.add(item, num_nodes)
        if flush:
            yield from self.flush()


def padding_efficiency(batches: Iterable[Sequence[int]]) -> float:
    """Σ n_i² / Σ B·N_max² over batches given as lists of node counts (1.0 = no padding)."""
    real = padded = 0
    for sizes in batches:
        if len(sizes):
            real += sum(n * n for n in sizes)
            padded += len(sizes) * max(sizes) ** 2
    return real / padded if padded else 1.0
