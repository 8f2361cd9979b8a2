"""How shards become batches: the loader's typed configuration (`data.loader` in a training YAML)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

import numpy as np

from gtscale.config import check_field_ranges, ranged
from gtscale.format import schema
from gtscale.loader.bucketing import Batcher, geometric_boundaries
from gtscale.loader.collate import BATCH_KEYS


@dataclass(frozen=True)
class LoaderConfig:
    """How shards become batches. All training randomness derives from `seed` and the epoch."""

    batching: Literal["node_budget", "graphs"] = "node_budget"  # close a batch by padded size, or by graph count
    node_budget: int = 4096  # node_budget: most padded node slots per batch, B × N_max
    pair_budget: int = ranged(0, low=0)  # node_budget: most padded node pairs per batch, B × N_max² (attention cost); 0 = no limit
    batch_size: int = 128  # graphs: graphs per batch
    bucketing: bool = True  # batch graphs of similar size together (bucketing.py); False = stream order
    bucket_ratio: float = ranged(1.05, low=1, low_open=True)  # geometric buckets [lo, hi) with hi − 1 ≤ lo × ratio: padding ≤ 1 − 1/ratio² per batch
    bucket_boundaries: list[int] = ranged(default_factory=list, low=1)  # explicit exclusive upper bounds, ascending; replaces bucket_ratio
    pad_to_bucket: bool = False  # one shape per bucket: pad nodes to the bucket's largest size and graphs to the batcher's capacity (compiled models, CUDA graphs)
    shuffle_buffer: int = ranged(2000, low=0)  # training: samples in WebDataset's shuffle buffer; 0 = shard-order only
    shuffle_initial: int = 500  # training: samples buffered before the first leaves (WebDataset's `initial`)
    seed: int = ranged(0, low=0)  # shard order, sample shuffle and sign flips derive from (seed, epoch, rank, worker)
    epoch_batches: int = ranged(0, low=0)  # training: batches per rank per epoch; 0 = about one pass over the split
    # training: read only the split's first K shards (a smaller corpus from the same shards, e.g.
    # the corpus-size rows of a scaling table); 0 = every shard. Evaluation always reads all.
    max_shards: int = ranged(0, low=0)
    num_workers: int = ranged(2, low=0)  # DataLoader worker processes per rank; 0 = load in the training process
    prefetch_factor: int = ranged(2, low=1)  # batches each worker prepares ahead
    pin_memory: bool = False  # page-locked batches, for faster host→GPU copies
    # how workers start: "forkserver" forks them from a fresh single-threaded process (a training rank's
    # threads make forking it unsafe: loader/workers.py); None = Python's default for this process
    start_method: Literal["fork", "spawn", "forkserver"] | None = "forkserver"
    on_error: Literal["raise", "skip"] = "raise"  # corrupt shard or sample: stop naming it, or skip it (counted, logged)
    verify_checksums: bool = True  # compare every shard's size and sha256 with the manifest before reading it
    # optional Batch fields the model needs (collate.BATCH_KEYS)
    keys: list[str] = field(default_factory=lambda: [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.Y])
    path_edges_max_dist: int = ranged(0, low=0, high=schema.SPD_MAX - 1)  # Graphormer's multi_hop_max_dist D for Batch.path_edges; 0 = not built
    sign_flip: bool = True  # training: random sign flips of svd_pe and lap_pe

    def __post_init__(self):
        check_field_ranges(self)  # also when built in code (predict, the benchmarks)
        if self.batching == "node_budget" and self.node_budget <= 0:
            raise ValueError("node_budget must be > 0 with batching: node_budget")
        if self.batching == "graphs" and self.batch_size <= 0:
            raise ValueError("batch_size must be > 0 with batching: graphs")
        if any(b <= a for a, b in zip(self.bucket_boundaries, self.bucket_boundaries[1:])):
            raise ValueError("bucket_boundaries must be strictly ascending")
        if self.pad_to_bucket and not self.bucketing:
            raise ValueError("pad_to_bucket needs bucketing (a bucket is the shape batches are padded to)")
        unknown = [k for k in self.keys if k not in BATCH_KEYS]
        if unknown:
            raise ValueError(f"keys: {unknown[0]!r} is not a Batch key (choose from {', '.join(BATCH_KEYS)})")

    def batcher(self) -> Batcher:
        boundaries = None
        if self.bucketing:
            boundaries = self.bucket_boundaries or geometric_boundaries(self.bucket_ratio)
        if self.batching == "graphs":
            return Batcher(max_graphs=self.batch_size, boundaries=boundaries)
        return Batcher(node_budget=self.node_budget, pair_budget=self.pair_budget, boundaries=boundaries, pad_to_bucket=self.pad_to_bucket)

    def static_shape(self, max_graph_nodes: int) -> tuple[int, int]:
        """(graphs, nodes) every batch whose largest graph has `max_graph_nodes` nodes is padded to
        under pad_to_bucket: its bucket's largest size, and as many graphs as the batcher lets
        a batch of that size hold (a graph larger than the budget on its own: a batch of one)."""
        boundaries = self.bucket_boundaries or geometric_boundaries(self.bucket_ratio)
        bucket = bisect.bisect_right(boundaries, max_graph_nodes)
        nodes = boundaries[bucket] - 1 if bucket < len(boundaries) else max_graph_nodes
        if self.batching == "graphs":
            return self.batch_size, nodes
        graphs = self.node_budget // nodes
        if self.pair_budget:
            graphs = min(graphs, self.pair_budget // (nodes * nodes))
        return max(graphs, 1), nodes

    @property
    def workers_per_rank(self) -> int:
        """Logical workers (slots) per rank: the in-process loader counts as one."""
        return max(1, self.num_workers)


class SeedPurpose(IntEnum):
    """What a derived seed is for, mixed into `derive_seed` so that the streams of one (seed, epoch)
    never coincide. Every loader's purposes are listed here, so that no two share a number; the
    numbers decide the batches of a saved run, so an existing one never changes."""

    SHARD_ORDER = 0  # shard loader: the order of a slot's shards in an epoch
    SAMPLE_SHUFFLE = 1  # shard loader: the shuffle buffer of (rank, worker)
    SIGN_FLIP = 2  # shard loader: the eigenvector sign flips of one batch
    EGO_TARGET_ORDER = 3  # online ego loader (graphs/online.py): the permutation of the training targets
    INDUCED_ROUND = 4  # induced-subgraph loader (graphs/induced.py): the node keys of one training round
    INDUCED_EVAL_PARTS = 5  # induced-subgraph loader: the permutation cut into evaluation parts
    FANOUT_TARGET_ORDER = 6  # fan-out loader (graphs/fanout.py): the permutation of the training targets
    FANOUT_NEIGHBOURS = 7  # fan-out loader: the neighbourhoods of one batch
    WORKER_SEEDS = 8  # every loader: the DataLoader's base seed of one epoch's workers on a rank (stream.py)


def derive_seed(*parts: int) -> int:
    """A 64-bit seed from non-negative ints; distinct tuples give independent streams."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0])

