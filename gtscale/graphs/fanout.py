"""The online loader of fan-out neighbourhoods, for the models that attend along edges (sparse
Energy Transformer, MNA-GT): a batch is `batch_targets` target nodes, each with its k-hop
neighbourhood sampled from the memory-mapped store with per-hop fan-outs (neighbourhoods.py), as
one EdgeBatch with a graph per target; only the targets are scored (target_rows: each tree's
first node). Production GNN stacks train the same way (PyG's NeighborLoader, DGL's neighbour
samplers); unlike the induced protocol (induced.py), where a node keeps about `fraction` of its
neighbours, a target here sees up to fanouts[0] of them, and each of those up to fanouts[1] of
theirs, whatever the graph's size.

Targets. A split's targets are dealt to the (rank, worker) slots as the online ego loader deals
them (online.py): slot s = rank + world_size·worker takes every S-th target (S slots) of a
permutation seeded by (seed, epoch) in training, of the targets in node order in evaluation, so
the slots' sets are disjoint. A slot cuts its targets into consecutive batches of batch_targets:
in evaluation one pass (every eval target scored exactly once across ranks × workers), in
training `quota` batches, wrapping round to the slot's first targets when it runs out. An epoch is
`epoch_batches` batches per rank; by default about one pass over the split, and at least the
induced loader's MIN_EPOCH_ROUNDS rounds of the rank's workers (workers start afresh each epoch).

A batch's node count changes with every sample, and oneDNN (which runs the models' CPU weight
products: gtscale/models/linear.py) caches a kernel with its working memory for every new shape,
up to 1,024 of them: with a new node count every batch, fan-out training on a T-Social-size graph
reaches 8.9 GiB within 437 steps (docs/results/graph-sampling.md).
So a batch is padded up to the next of the loader's geometric bucket sizes (ratio 1.05: at most
5 % more nodes), with isolated nodes in filler graphs no larger than a neighbourhood (store_edge_batch),
which leaves every output of the batch's own nodes as it was: its node counts then take a few
dozen values over a whole run.

Neighbourhoods are drawn by a generator seeded per batch: in training by (seed, epoch, rank,
worker, batch ordinal), in evaluation by (seed, the batch's first target), so evaluation samples
the same neighbourhoods every time. The sampling happens in `_collate`, which the replay of a
resume skips: replaying costs nothing, and the resumed run gets the batches the uninterrupted one
would (the shard loader's rule; gtscale.loader.stream).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.graphs.induced import MIN_EPOCH_ROUNDS, graph_task_manifest
from gtscale.graphs.neighbourhoods import sample_neighbourhoods
from gtscale.graphs.node_batches import PROVIDED_KEYS, EdgeStoreLoader, store_edge_batch
from gtscale.graphs.store import GraphStore
from gtscale.loader.bucketing import geometric_boundaries
from gtscale.loader.config import LoaderConfig, SeedPurpose, derive_seed
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.loader.slots import ShardStream

#: Bucket ratio of the padded node counts (see the module docstring).
NODE_BUCKET_RATIO = 1.05


def padded_size(num_nodes: int) -> int:
    """The smallest geometric bucket size (ratio NODE_BUCKET_RATIO) of at least num_nodes nodes."""
    bounds = geometric_boundaries(NODE_BUCKET_RATIO, max(num_nodes, 2))
    return next(hi - 1 for hi in bounds if hi - 1 >= num_nodes)


class FanoutStream(ShardStream):
    """A `ShardStream` whose items are batches of targets with their fan-out neighbourhoods."""

    def __init__(self, store_path: Path, targets: np.ndarray, fanouts: list[int], batch_targets: int, config: LoaderConfig, *,
                 train: bool, rank: int, world_size: int, epoch_batches: int):
        super().__init__([], config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
        self.store_path, self.targets = Path(store_path), np.asarray(targets, np.int64)
        self.fanouts, self.batch_targets = [int(f) for f in fanouts], int(batch_targets)
        self._store: GraphStore | None = None
        self._slot: tuple[tuple[int, int], np.ndarray] | None = None  # ((epoch, worker), its slot_targets)

    def __getstate__(self) -> dict:  # spawned workers open their own store
        return {**self.__dict__, "_store": None, "_slot": None}

    def _open(self) -> GraphStore:
        if self._store is None:
            self._store = GraphStore.open(self.store_path)
        return self._store

    def slot_targets(self, worker: int) -> np.ndarray:
        """The targets of slot (this rank, `worker`) in this epoch; slots' sets are disjoint. Kept
        for the epoch: every batch reads them, and permuting T-Social's 2.3 M train nodes costs
        more than sampling a batch."""
        if self._slot is None or self._slot[0] != (self.epoch, worker):
            order = self.targets
            if self.train:
                order = np.random.default_rng(derive_seed(self.config.seed, self.epoch, SeedPurpose.FANOUT_TARGET_ORDER)).permutation(order)
            self._slot = ((self.epoch, worker), order[self.rank + self.world_size * worker :: self.world_size * self.config.workers_per_rank])
        return self._slot[1]

    def _batches(self, worker: int, skipped: list) -> Iterator[int]:
        """Each batch's first position in the slot's targets: cheap, so replay costs nothing."""
        if self.train:
            return iter(range(0, self.quota(worker) * self.batch_targets, self.batch_targets))
        return iter(range(0, len(self.slot_targets(worker)), self.batch_targets))

    def _collate(self, start: int, ordinal: int, worker: int, skipped: list) -> EdgeBatch:
        mine = self.slot_targets(worker)
        if self.train:
            targets = mine[np.arange(start, start + self.batch_targets) % len(mine)]
            seed = derive_seed(self.config.seed, self.epoch, SeedPurpose.FANOUT_NEIGHBOURS, self.rank, worker, ordinal)
        else:
            targets = mine[start : start + self.batch_targets]
            seed = derive_seed(self.config.seed, SeedPurpose.FANOUT_NEIGHBOURS, int(targets[0]))
        return self.neighbourhood_batch(targets, np.random.default_rng(seed))

    def neighbourhood_batch(self, targets: np.ndarray, rng: np.random.Generator) -> EdgeBatch:
        """One EdgeBatch: a graph per target, its sampled neighbourhood, padded to a bucket size; only
        the targets scored."""
        store = self._open()
        trees = sample_neighbourhoods(store.indptr, store.indices, targets, self.fanouts, rng)
        largest = 1 + sum(int(np.prod(self.fanouts[: h + 1])) for h in range(len(self.fanouts)))  # the most nodes a tree can have
        return store_edge_batch(store, trees.nodes, trees.edge_index, trees.roots, targets, trees.tree, len(targets),
                                padded_nodes=padded_size(len(trees.nodes)), filler_graph_nodes=largest)


class FanoutLoader(EdgeStoreLoader):
    """`EdgeStoreLoader` over a `FanoutStream`."""

    def _sampler_settings(self) -> bytes:
        return json.dumps({"fanouts": self._stream.fanouts, "batch_targets": self._stream.batch_targets}).encode()


def build_fanout_loader(store_path: str | Path, targets: np.ndarray, fanouts: list[int], batch_targets: int, config: LoaderConfig, *,
                        train: bool, rank: int | None = None, world_size: int | None = None) -> FanoutLoader:
    """A loader of `targets` (a split's node ids) in batches of `batch_targets`, each with its
    fan-out neighbourhood. rank and world_size default to the job's (RANK/WORLD_SIZE, else one
    process)."""
    import webdataset as wds

    if rank is None or world_size is None:
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    store = GraphStore.open(store_path)
    targets = np.unique(np.asarray(targets, np.int64))
    if not fanouts or min(fanouts) < 1:
        raise UserError(f"data.graph.fanouts: one or more fan-outs, each >= 1 (got {list(fanouts)})")
    if batch_targets < 1:
        raise UserError(f"data.graph.batch_targets: must be >= 1, got {batch_targets}")
    if len(targets) == 0:
        raise UserError(f"{store_path}: no target nodes to sample")
    if targets[0] < 0 or targets[-1] >= store.num_nodes:
        raise UserError(f"{store_path}: target node ids must lie in 0..{store.num_nodes - 1}")
    unsupported = [k for k in config.keys if k not in PROVIDED_KEYS]
    if unsupported:
        raise UserError(f"data.graph: fan-out neighbourhoods carry node features and edges only; the model asks for {unsupported[0]!r}")
    slots = world_size * config.workers_per_rank
    if train and len(targets) < slots:
        raise UserError(f"{store_path}: {len(targets)} target nodes for {slots} rank×worker slots; use fewer workers")
    epoch_batches = 0
    if train:
        passes = -(-len(targets) // (world_size * batch_targets))
        epoch_batches = config.epoch_batches or max(MIN_EPOCH_ROUNDS * config.workers_per_rank, passes)
    stream = FanoutStream(Path(store_path), targets, fanouts, batch_targets, config, train=train, rank=rank, world_size=world_size,
                          epoch_batches=epoch_batches)
    return FanoutLoader(stream, graph_task_manifest(store, {}))
