"""The online loader: ego subgraphs sampled from the memory-mapped graph store during training.

It is the shard loader (`gtscale.loader.stream`) with another source of records: `EgoStream`
is a `ShardStream` whose records come from `EgoSampler` instead of tar members, so the slot
rules, shuffle buffer, bucketing, epoch cut, sign flips, DataLoader workers, lockstep filler and
exact resume are the shard loader's own. Every worker opens the store itself (a memory map: all
workers and ranks of a machine share one copy through the page cache) and keeps one sampler.

Targets. A split's target nodes are dealt to the (rank, worker) slots like shards are: slot
s = rank + world_size·worker takes every (world_size·workers)-th target starting at s — of the
targets in node order for evaluation (each target exactly once, in one slot), of a permutation
seeded by (seed, epoch) for training. The slots' target sets are therefore disjoint in every
epoch. A training slot that has delivered all its targets before the epoch's last batch starts
them again (the shard loader wraps round its shards the same way).

Cost. Sampling the nodes of an ego subgraph is cheap; its structure (hops, predecessors, SVD) is
not. Records carry only nodes and edges until a batch is collated, so the replay of a resume
(which re-batches the items already delivered without collating them) samples nodes only.
Records and batches are those of `gtscale shard graph-ego` with the same options: the sampler
depends only on (sampler seed, target), and both build records with `subgraph_records`.
"""

from __future__ import annotations

import abc
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.manifest import check_readable
from gtscale.graphs.sample import EgoSampler, EgoSubgraph
from gtscale.graphs.shard_ego import EgoShardOptions, subgraph_records
from gtscale.graphs.store import MANIFEST, GraphStore
from gtscale.io import sha256_file
from gtscale.loader.batch import Batch
from gtscale.loader.config import LoaderConfig, SeedPurpose, derive_seed
from gtscale.loader.slots import ShardStream
from gtscale.loader.collate import record_keys
from gtscale.loader.stream import StreamLoader, mean_graphs_per_batch
from gtscale.prep.structure import StructureOptions

#: Targets sampled at once (the compiled sampler's batch).
_CHUNK = 256
#: Targets whose ego node counts size the batches when epoch_batches = 0.
_ESTIMATE_TARGETS = 2000


class EgoStream(ShardStream):
    """A `ShardStream` over a split's target nodes, sampling their ego subgraphs as it goes."""

    def __init__(self, store_path: Path, targets: np.ndarray, options: EgoShardOptions, config: LoaderConfig, *, train: bool,
                 rank: int, world_size: int, epoch_batches: int):
        super().__init__([], config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
        self.store_path, self.targets, self.options = Path(store_path), np.asarray(targets, np.int64), options
        self._store: GraphStore | None = None
        self._sampler: EgoSampler | None = None

    def __getstate__(self) -> dict:  # spawned workers open their own store and sampler
        return {**self.__dict__, "_store": None, "_sampler": None}

    def _open(self) -> tuple[GraphStore, EgoSampler]:
        if self._sampler is None:
            self._store = GraphStore.open(self.store_path)
            self._sampler = EgoSampler(self._store.indptr, self._store.indices, self.options.fanouts, self.options.max_nodes, self.options.seed)
        return self._store, self._sampler

    def slot_targets(self, worker: int) -> np.ndarray:
        """The targets of slot (this rank, `worker`) in this epoch; slots' sets are disjoint."""
        order = self.targets
        if self.train:
            order = np.random.default_rng(derive_seed(self.config.seed, self.epoch, SeedPurpose.EGO_TARGET_ORDER)).permutation(order)
        return order[self.rank + self.world_size * worker :: self.world_size * self.config.workers_per_rank]

    def _records(self, worker: int, skipped: list) -> Iterator[Record]:
        mine = self.slot_targets(worker)
        _, sampler = self._open()
        while True:  # evaluation: one pass; training: wrap round, the epoch is cut by batch count
            for start in range(0, len(mine), _CHUNK):
                for sub in sampler.sample(mine[start : start + _CHUNK]):
                    arrays = {schema.NODE_ID: sub.nodes, schema.EDGE_INDEX: sub.edge_index}
                    yield Record(f"node{sub.target}", str(self.store_path), len(sub.nodes), sub.target, arrays)
            if not self.train:
                return

    def _collate(self, records: list[Record], ordinal: int, worker: int, skipped: list) -> Batch:
        """Structure and features of the batch's subgraphs (only now: replayed batches skip this)."""
        store, _ = self._open()
        subgraphs = [EgoSubgraph(r.idx, r.arrays[schema.NODE_ID], r.arrays[schema.EDGE_INDEX]) for r in records]
        full = [Record(r.key, r.shard, r.num_nodes, r.idx, {k: v for k, v in rec.items() if k != schema.META})
                for r, rec in zip(records, subgraph_records(store, subgraphs, self.options))]
        return super()._collate(full, ordinal, worker, skipped)


class StoreLoader(StreamLoader, abc.ABC):
    """`StreamLoader` over a stream that samples a graph store's target nodes online: the same
    iteration, epochs, state_dict and filler batches. Its fingerprint (what a resumed position
    must match) is the store's manifest, the targets and the sampler's settings."""

    @property
    def num_samples(self) -> int:
        """Target nodes of the split (evaluation scores each once)."""
        return len(self._stream.targets)

    @abc.abstractmethod
    def _sampler_settings(self) -> bytes:
        """The sampler's settings as bytes, for the fingerprint: each sampling loader defines its own."""

    def _fingerprint(self) -> str:
        s = self._stream
        digest = hashlib.sha256(sha256_file(s.store_path / MANIFEST).encode())
        digest.update(s.targets.tobytes())
        digest.update(self._sampler_settings())
        return digest.hexdigest()[:16]


class OnlineEgoLoader(StoreLoader):
    """`StoreLoader` over an `EgoStream`."""

    def _sampler_settings(self) -> bytes:
        return json.dumps(asdict(self._stream.options), sort_keys=True).encode()


def _filler_manifest(store: GraphStore, options: EgoShardOptions) -> dict:
    """What filler_record reads from a shard manifest, for the records this loader makes."""
    return {"_dir": str(store.path), "schema_version": schema.SCHEMA_VERSION, "features": {"node_float": store.manifest["num_features"]},
            "transform": asdict(options.structure), "task": {"num_targets": 1}}


def ego_options(fanouts: list[int], max_nodes: int, seed: int, svd_rank: int, lap_k: int) -> EgoShardOptions:
    """The options of `gtscale shard graph-ego --fanouts --max-nodes --sampler-seed --svd-rank
    --lap-k` (shortest paths and degrees on, as there): the training config's data.graph with
    sampler ego gets the records those shards would hold."""
    return EgoShardOptions(StructureOptions(svd_rank=svd_rank, lap_k=lap_k), tuple(fanouts), max_nodes, seed)


def build_online_loader(store_path: str | Path, targets: np.ndarray, options: EgoShardOptions, config: LoaderConfig, *, train: bool,
                        rank: int | None = None, world_size: int | None = None) -> OnlineEgoLoader:
    """A loader of the ego subgraphs of `targets` (a split's node ids) sampled from the store.

    rank and world_size default to the job's (RANK/WORLD_SIZE, else torch.distributed, else one process)."""
    import webdataset as wds

    if rank is None or world_size is None:
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    store = GraphStore.open(store_path)
    targets = np.asarray(targets, np.int64)
    if len(targets) == 0:
        raise UserError(f"{store_path}: no target nodes to sample")
    if targets.min() < 0 or targets.max() >= store.num_nodes:
        raise UserError(f"{store_path}: target node ids must lie in 0..{store.num_nodes - 1}")
    slots = world_size * config.workers_per_rank
    if train and len(targets) < slots:
        raise UserError(f"{store_path}: {len(targets)} target nodes for {slots} rank×worker slots; use fewer workers")
    manifest = _filler_manifest(store, options)
    check_readable(manifest, record_keys(config.keys, config.path_edges_max_dist))  # the structure options make what the model needs
    epoch_batches = 0
    if train:
        sampler = EgoSampler(store.indptr, store.indices, options.fanouts, options.max_nodes, options.seed)
        sizes = [len(s.nodes) for s in sampler.sample(targets[:: max(1, len(targets) // _ESTIMATE_TARGETS)])]
        epoch_batches = config.epoch_batches or max(1, int(len(targets) / (world_size * mean_graphs_per_batch(sizes, config))))
    stream = EgoStream(Path(store_path), targets, options, config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
    return OnlineEgoLoader(stream, manifest)
