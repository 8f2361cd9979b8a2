"""The online loader of random node-induced subgraphs, for the models that attend along edges
(sparse Energy Transformer, MNA-GT): EdgeBatches sampled from the memory-mapped graph store.

Training (ET paper, App. C: a random 5 % of the nodes per sample on T-Social and T-Finance).
Round j of epoch e orders all N nodes at random, seeded by (seed, epoch, j), and cuts the order
into consecutive parts of n = round(fraction·N) nodes; slot s = rank + world_size·worker takes
part s. The order is that of a key per node, splitmix64(mix(seed) ^ node): a bijection of the
node ids, so no two keys tie, and a slot finds its part (the nodes whose key ranks in
[s·n, (s+1)·n)) with one partial sort, without permuting all N nodes (5× faster on T-Social).
Its batch is the subgraph induced by those nodes (every stored edge among them, both directions)
as one EdgeBatch whose targets are the part's training-split nodes: target_id their global ids,
target_y their labels. The slots' node sets of a round are therefore disjoint, which needs
slots·n ≤ N (fraction × ranks × workers ≤ 1; refused otherwise). A slot's j-th batch is round j's,
so a rank's batch b is worker (b mod K)'s round b div K, the shard loader's round-robin. An epoch
is `epoch_batches` batches per rank; by default rounds enough to draw about N nodes, and at least
`MIN_EPOCH_ROUNDS` (loader workers start afresh each epoch, the next epoch's 8 batches before the
end: a 2-batch epoch would stall on every worker start). The authors
draw 5 % of each split's labelled nodes; here the fraction is of every node, so unlabelled nodes
and the other splits' nodes (features, never labels) are context, as in a transductive setting.

Evaluation. One permutation seeded by the loader seed alone (the same at every evaluation), cut into
P = round(1/fraction) parts of about fraction·N nodes; slot s takes parts s, s+S, s+2S, … and scores
the eval-split nodes of each part's induced subgraph. Every node lies in exactly one part, so each
eval node is scored exactly once across ranks × workers. Parts rather than one whole-graph pass:
the model was trained on fraction-subgraphs, where a node sees about a `fraction` of its neighbours,
and the parts show it the same; and a part costs what a training batch costs whatever the graph's
size, where T-Social whole (146 M directed edges) would need E·H attention scores of 1.7 GB (fp32,
H = 3) and 3 GB of node states in a single forward on one device.

Resume. This is the shard loader (`StreamLoader` over a `ShardStream`) with another source: a
position is how many batches each logical worker has delivered; a worker's stream depends only on
(seed, epoch, rank, worker), and the subgraph is made in `_collate`, which the replay of a resume
skips, so replaying costs nothing and the resumed run gets the batches the uninterrupted one would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.graphs.node_batches import PROVIDED_KEYS, EdgeStoreLoader, store_edge_batch
from gtscale.graphs.sample import induced_edges, node_keys
from gtscale.graphs.splits import mask_split, node_task_section, ratio_split
from gtscale.graphs.store import GraphStore
from gtscale.loader.config import LoaderConfig, SeedPurpose, derive_seed
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.loader.slots import ShardStream

#: Default epochs are at least this many rounds (see the module docstring).
MIN_EPOCH_ROUNDS = 16


def part_size(num_nodes: int, fraction: float) -> int:
    return max(1, int(round(fraction * num_nodes)))


def graph_splits(store: GraphStore, train_ratio: float, split_seed: int, mask_column: int | None) -> dict[str, np.ndarray]:
    """train / val / test node ids: a stored mask column (GADBench) or the BWGNN / ET ratio split."""
    if mask_column is not None:
        return mask_split(store.masks, mask_column, str(store.path))
    return ratio_split(store.labels, train_ratio, split_seed)


def graph_task_manifest(store: GraphStore, splits: dict[str, np.ndarray]) -> dict:
    """What the trainer reads from a shard manifest (task type, label counts, feature width, splits),
    for node tasks sampled from a store instead of read from shards."""
    return {"_dir": str(store.path), "schema_version": schema.SCHEMA_VERSION, "dataset": store.manifest["dataset"],
            "features": {"node_float": int(store.manifest["num_features"])},
            "task": node_task_section(store.labels, splits),
            "splits": {split: {"samples": int(len(nodes))} for split, nodes in splits.items()}}


class InducedStream(ShardStream):
    """A `ShardStream` whose items are induced subgraphs of node parts (see the module docstring)."""

    def __init__(self, store_path: Path, num_nodes: int, targets: np.ndarray, fraction: float, config: LoaderConfig, *,
                 train: bool, rank: int, world_size: int, epoch_batches: int):
        super().__init__([], config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
        self.store_path, self.num_nodes, self.fraction = Path(store_path), num_nodes, fraction
        self.targets = np.asarray(targets, np.int64)
        self._store: GraphStore | None = None
        self._local: np.ndarray | None = None  # −1 per node: the induced-edge kernel's scratch
        self._is_target: np.ndarray | None = None
        self._parts: list[np.ndarray] | None = None

    def __getstate__(self) -> dict:  # spawned workers open their own store and scratch arrays
        return {**self.__dict__, "_store": None, "_local": None, "_is_target": None, "_parts": None}

    def _open(self) -> GraphStore:
        if self._store is None:
            self._store = GraphStore.open(self.store_path)
            self._local = np.full(self.num_nodes, -1, np.int32)
            self._is_target = np.zeros(self.num_nodes, bool)
            self._is_target[self.targets] = True
        return self._store

    @property
    def slots(self) -> int:
        return self.world_size * self.config.workers_per_rank

    def slot(self, worker: int) -> int:
        return self.rank + self.world_size * worker

    def round_nodes(self, worker: int, round_: int) -> np.ndarray:
        """Training: the sorted nodes of slot (rank, worker) in round `round_` of this epoch: those
        whose key ranks in [s·n, (s+1)·n) (keys are distinct, so the slots' parts are disjoint)."""
        keys = node_keys(derive_seed(self.config.seed, self.epoch, SeedPurpose.INDUCED_ROUND, round_), self.num_nodes)
        n, s = part_size(self.num_nodes, self.fraction), self.slot(worker)
        bounds = np.partition(keys, [s * n, (s + 1) * n - 1])
        return np.flatnonzero((keys >= bounds[s * n]) & (keys <= bounds[(s + 1) * n - 1]))

    def eval_parts(self) -> list[np.ndarray]:
        """Evaluation: every node in exactly one of `eval_part_count` parts, each sorted."""
        if self._parts is None:
            order = np.random.default_rng(derive_seed(self.config.seed, SeedPurpose.INDUCED_EVAL_PARTS)).permutation(self.num_nodes)
            self._parts = [np.sort(part) for part in np.array_split(order, self.eval_part_count)]
        return self._parts

    @property
    def eval_part_count(self) -> int:
        return max(1, min(self.num_nodes, int(round(1 / self.fraction))))

    def _batches(self, worker: int, skipped: list) -> Iterator[int]:
        """Round numbers (training) or part numbers (evaluation): cheap, so replay costs nothing."""
        if self.train:
            return iter(range(self.quota(worker)))
        return iter(range(self.slot(worker), self.eval_part_count, self.slots))

    def _collate(self, key: int, ordinal: int, worker: int, skipped: list) -> EdgeBatch:
        nodes = self.round_nodes(worker, key) if self.train else self.eval_parts()[key]
        return self.subgraph_batch(nodes, key)

    def subgraph_batch(self, nodes: np.ndarray, idx: int) -> EdgeBatch:
        """One EdgeBatch: the subgraph induced by `nodes` (sorted global ids), its targets the
        split's nodes among them."""
        store = self._open()
        edge_index = induced_edges(store.indptr, store.indices, nodes, self._local)
        return store_edge_batch(store, nodes, edge_index, np.flatnonzero(self._is_target[nodes]), np.array([idx]))


class InducedLoader(EdgeStoreLoader):
    """`EdgeStoreLoader` over an `InducedStream`."""

    def _sampler_settings(self) -> bytes:
        return repr(self._stream.fraction).encode()


def build_induced_loader(store_path: str | Path, targets: np.ndarray, fraction: float, config: LoaderConfig, *, train: bool,
                         rank: int | None = None, world_size: int | None = None) -> InducedLoader:
    """A loader of induced subgraphs of `fraction` of the store's nodes, scoring `targets` (a split's
    node ids). rank and world_size default to the job's (RANK/WORLD_SIZE, else one process)."""
    import webdataset as wds

    if rank is None or world_size is None:
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    store = GraphStore.open(store_path)
    n_nodes, targets = store.num_nodes, np.unique(np.asarray(targets, np.int64))
    if not 0 < fraction <= 1:
        raise UserError(f"data.graph.fraction: must be in (0, 1], got {fraction}")
    if len(targets) == 0:
        raise UserError(f"{store_path}: no target nodes to sample")
    if targets[0] < 0 or targets[-1] >= n_nodes:
        raise UserError(f"{store_path}: target node ids must lie in 0..{n_nodes - 1}")
    unsupported = [k for k in config.keys if k not in PROVIDED_KEYS]
    if unsupported:
        raise UserError(f"data.graph: induced subgraphs carry node features and edges only; the model asks for {unsupported[0]!r}")
    slots = world_size * config.workers_per_rank
    n = part_size(n_nodes, fraction)
    if train and slots * n > n_nodes:
        raise UserError(f"data.graph.fraction: {slots} rank×worker slots × {n} nodes ({fraction:g} of {n_nodes}) exceed the graph; "
                        f"disjoint samples need fraction × ranks × workers ≤ 1 (lower the fraction or data.loader.num_workers)")
    epoch_batches = 0
    if train:
        epoch_batches = config.epoch_batches or config.workers_per_rank * max(MIN_EPOCH_ROUNDS, int(round(n_nodes / (slots * n))))
    stream = InducedStream(Path(store_path), n_nodes, targets, fraction, config, train=train, rank=rank, world_size=world_size,
                           epoch_batches=epoch_batches)
    return InducedLoader(stream, graph_task_manifest(store, {}))
