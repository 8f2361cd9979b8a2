"""The streaming loader: manifest shards → split by rank and worker → shuffle → bucketed batches.

Build one with `build_loader(manifest, split, LoaderConfig, train=...)` and iterate it; each
iteration is one epoch on this rank and yields `Batch`es.

Slots. Every rank runs `num_workers` DataLoader workers (one when loading in-process); a
(rank, worker) pair is a *slot*. Shards are dealt to slots with WebDataset's rule: rank r takes
every world_size-th shard starting at r (`split_by_node`), worker w every num_workers-th of those
(`split_by_worker`). The same `islice` rule is applied here with explicit ids instead of calling
those functions, because resuming needs a worker's *logical* id to differ from the DataLoader's
(see Resuming).

Training. The shard order is permuted per epoch by WebDataset's `SimpleShardList` seeded from
(seed, epoch); each slot streams its shards, wrapping round to its first one when it runs out,
through WebDataset's `shuffle` buffer seeded from (seed, epoch, rank, worker), and the stream is
cut after a fixed number of batches — WebDataset's split_by_node + repeat + `with_epoch` recipe.
**An epoch is `epoch_batches` batches on every rank**, the same number everywhere, so no rank waits
at a collective that others never reach. By default `epoch_batches` = ⌊samples / (world_size ×
graphs per batch)⌋, i.e. about one pass over the split (graphs per batch is estimated with the
real batcher on the node counts of the first shards). Slots hold different amounts of data, so
within one epoch a sample can be seen twice or not at all; as the permutation changes every
epoch, no sample is favoured. Resampling shards with replacement (`ResampledShards`) would also
equalise ranks, but leaves about 1/e of a small split's shards unread in each epoch.

Evaluation. Shards are dealt in manifest order, nothing is shuffled or cut, and the last partial
batches are flushed: every sample is yielded exactly once by exactly one slot (minus samples
skipped under `on_error: skip`, which are counted and logged). Ranks may therefore yield different
numbers of batches. `gtscale.data.distributed_eval.lockstep` pads the shorter ranks with
`filler_batch()` (idx −1, no labels) when every rank must run the same number of forward passes
(ZeRO-3), and `gather_predictions` collects (idx, prediction) pairs from all ranks.

Resuming. A worker's stream depends only on (seed, epoch, rank, logical worker), so a position is
how many items each logical worker has delivered plus which worker delivers next.
`state_dict()` records that (per rank: save one per rank); after `load_state_dict()` each worker
replays its stream without collating the items already delivered, and the DataLoader's physical
worker p plays logical worker (p + next) mod num_workers, so its round-robin starts where the
interrupted one stopped. The remaining batches are exactly those of an uninterrupted run. Sign
flips are drawn from a generator seeded per batch, so replay needs no RNG state.

Workers are started afresh for every epoch (no persistent workers): the epoch and the position
travel to them inside the dataset object. In training, the next epoch's workers are started a few
batches before the current epoch ends, so their start-up overlaps training. Ranks started by `torch.multiprocessing.spawn` would
spawn their workers too, re-importing torch every epoch; `start_method: fork` avoids that (ranks
started by torchrun, srun or deepspeed fork by default). The resume rule relies on the
DataLoader delivering workers' items in round-robin order, which is its default (`in_order`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import logging
import random
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Literal, NamedTuple

import numpy as np
import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from gtscale.data import schema
from gtscale.data.batch import Batch
from gtscale.data.bucketing import Batcher, geometric_boundaries
from gtscale.data.collate import BATCH_KEYS, collate, record_keys
from gtscale.data.decode import Record, decode_array, decode_record
from gtscale.data.shardfile import ShardEntry, ShardError, iter_samples, manifest_shards, read_shard
from gtscale.errors import UserError
from gtscale.shards.manifest import load_manifest

log = logging.getLogger(__name__)

#: For epoch_batches = 0: node counts read from the first shards, and graphs run through the
#: batcher (in reshuffled passes over those counts) to estimate the mean graphs per batch.
_ESTIMATE_SAMPLES = 2000
_ESTIMATE_GRAPHS = 20_000
#: Training: the next epoch's workers start this many batches before the current epoch ends.
_NEXT_EPOCH_LOOKAHEAD = 8
#: Batch.idx of filler graphs (see distributed_eval); no dataset has a negative idx.
FILLER_IDX = -1


@dataclass
class LoaderConfig:
    """How shards become batches. All training randomness derives from `seed` and the epoch."""

    batching: Literal["node_budget", "graphs"] = "node_budget"  # close a batch by padded size, or by graph count
    node_budget: int = 4096  # node_budget: most padded node slots per batch, B × N_max
    pair_budget: int = 0  # node_budget: most padded node pairs per batch, B × N_max² (attention cost); 0 = no limit
    batch_size: int = 128  # graphs: graphs per batch
    bucketing: bool = True  # batch graphs of similar size together (bucketing.py); False = stream order
    bucket_ratio: float = 1.05  # geometric buckets [lo, hi) with hi − 1 ≤ lo × ratio: padding ≤ 1 − 1/ratio² per batch
    bucket_boundaries: list[int] = field(default_factory=list)  # explicit exclusive upper bounds, ascending; replaces bucket_ratio
    shuffle_buffer: int = 2000  # training: samples in WebDataset's shuffle buffer; 0 = shard-order only
    shuffle_initial: int = 500  # training: samples buffered before the first leaves (WebDataset's `initial`)
    seed: int = 0  # shard order, sample shuffle and sign flips derive from (seed, epoch, rank, worker)
    epoch_batches: int = 0  # training: batches per rank per epoch; 0 = about one pass over the split
    num_workers: int = 2  # DataLoader worker processes per rank; 0 = load in the training process
    prefetch_factor: int = 2  # batches each worker prepares ahead
    pin_memory: bool = False  # page-locked batches, for faster host→GPU copies
    start_method: Literal["fork", "spawn", "forkserver"] | None = None  # how workers start; None = Python's default for this process
    on_error: Literal["raise", "skip"] = "raise"  # corrupt shard or sample: stop naming it, or skip it (counted, logged)
    verify_checksums: bool = True  # compare every shard's size and sha256 with the manifest before reading it
    keys: list[str] = field(default_factory=lambda: [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.Y])  # optional Batch fields the model needs (collate.BATCH_KEYS)
    path_edges_max_dist: int = 0  # Graphormer's multi_hop_max_dist D for Batch.path_edges; 0 = not built
    sign_flip: bool = True  # training: random sign flips of svd_pe and lap_pe

    def __post_init__(self):
        if self.batching == "node_budget" and self.node_budget <= 0:
            raise ValueError("node_budget must be > 0 with batching: node_budget")
        if self.batching == "graphs" and self.batch_size <= 0:
            raise ValueError("batch_size must be > 0 with batching: graphs")
        if self.pair_budget < 0 or self.epoch_batches < 0 or self.shuffle_buffer < 0 or self.num_workers < 0:
            raise ValueError("pair_budget, epoch_batches, shuffle_buffer and num_workers must be >= 0")
        if self.bucket_ratio <= 1.0:
            raise ValueError("bucket_ratio must be > 1")
        if any(b <= a for a, b in zip(self.bucket_boundaries, self.bucket_boundaries[1:])) or any(b < 1 for b in self.bucket_boundaries):
            raise ValueError("bucket_boundaries must be positive and strictly ascending")
        if self.prefetch_factor < 1:
            raise ValueError("prefetch_factor must be >= 1")
        unknown = [k for k in self.keys if k not in BATCH_KEYS]
        if unknown:
            raise ValueError(f"keys: {unknown[0]!r} is not a Batch key (choose from {', '.join(BATCH_KEYS)})")
        if not 0 <= self.path_edges_max_dist < schema.SPD_MAX:
            raise ValueError(f"path_edges_max_dist must be in 0..{schema.SPD_MAX - 1}")

    def batcher(self) -> Batcher:
        boundaries = None
        if self.bucketing:
            boundaries = self.bucket_boundaries or geometric_boundaries(self.bucket_ratio)
        if self.batching == "graphs":
            return Batcher(max_graphs=self.batch_size, boundaries=boundaries)
        return Batcher(node_budget=self.node_budget, pair_budget=self.pair_budget, boundaries=boundaries)

    @property
    def workers_per_rank(self) -> int:
        """Logical workers (slots) per rank: the in-process loader counts as one."""
        return max(1, self.num_workers)


def derive_seed(*parts: int) -> int:
    """A 64-bit seed from non-negative ints; distinct tuples give independent streams."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0])


#: LoaderConfig fields that do not change which batches come out (free to change on resume).
_NOT_IN_STREAM = frozenset({"prefetch_factor", "pin_memory", "start_method", "on_error", "verify_checksums"})

# Purposes mixed into derived seeds, so the streams of one (seed, epoch) never coincide.
_SHARD_ORDER, _SAMPLE_SHUFFLE, _SIGN_FLIP = 0, 1, 2


class _Item(NamedTuple):
    """What a worker sends: a batch, or (batch None) the end of its stream or an error."""

    worker: int  # logical worker id within the rank
    batch: Batch | None
    skipped: tuple[tuple[str, int], ...]  # (message, samples lost) for data skipped since the previous item
    error: Exception | None = None


def _ignore_stop_signals(worker_id: int) -> None:
    """Workers leave SIGUSR1 (SLURM's warning before a time limit or preemption, which it may send
    to every process of a job step) to the training process, which checkpoints and then ends them.

    SIGTERM is left alone: it is how torch and multiprocessing end workers (an ignored SIGTERM
    hangs the exit), so a SIGTERM sent to the whole process group still kills the workers."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _identity(item):
    return item


class ShardStream(IterableDataset):
    """The per-slot pipeline behind `StreamLoader`; one instance per (rank, epoch, position)."""

    def __init__(self, shards: list[ShardEntry], config: LoaderConfig, *, train: bool, rank: int, world_size: int, epoch_batches: int):
        super().__init__()
        self.shards, self.config, self.train = shards, config, train
        self.rank, self.world_size, self.epoch_batches = rank, world_size, epoch_batches
        self.record_keys = record_keys(config.keys, config.path_edges_max_dist)
        self.epoch = 0
        self.consumed = [0] * config.workers_per_rank  # items each logical worker already delivered
        self.rotation = 0  # physical worker p plays logical worker (p + rotation) % workers

    # --- which shards, which samples ------------------------------------------------------------
    def slot_shards(self, worker: int) -> list[ShardEntry]:
        """The shards a slot reads this epoch: WebDataset's split_by_node then split_by_worker rule."""
        workers = self.config.workers_per_rank
        if self.train:
            names = [d["url"] for d in wds.SimpleShardList([s.name for s in self.shards], seed=derive_seed(self.config.seed, self.epoch, _SHARD_ORDER))]
            by_name = {s.name: s for s in self.shards}
            order = [by_name[name] for name in names]
        else:
            order = list(self.shards)
        mine = list(itertools.islice(itertools.islice(order, self.rank, None, self.world_size), worker, None, workers))
        if self.train and not mine:  # fewer shards than slots: share one rather than starve
            mine = [order[(self.rank + self.world_size * worker) % len(order)]]
        return mine

    def _skip(self, err: ShardError, lost: int, skipped: list) -> None:
        if self.config.on_error == "raise":
            raise err
        skipped.append((str(err), lost))

    def _read(self, entry: ShardEntry, skipped: list) -> Iterator[Record]:
        try:
            data = read_shard(entry, self.config.verify_checksums)
        except ShardError as err:
            self._skip(err, entry.samples, skipped)
            return
        samples, produced = iter_samples(data, entry.name), 0
        while True:
            try:
                key, members = next(samples)
            except StopIteration:
                return
            except ShardError as err:
                self._skip(err, max(entry.samples - produced, 0), skipped)
                return
            produced += 1
            try:
                record = decode_record(key, members, entry.name, self.record_keys)
            except ShardError as err:
                self._skip(err, 1, skipped)
                continue
            yield record

    def _records(self, worker: int, skipped: list) -> Iterator[Record]:
        shards = self.slot_shards(worker)
        if not self.train:
            for entry in shards:
                yield from self._read(entry, skipped)
            return
        while True:  # training streams wrap round; the epoch is cut by batch count
            count = 0
            for entry in shards:
                for record in self._read(entry, skipped):
                    count += 1
                    yield record
            if count == 0:
                names = ", ".join(s.name for s in shards)
                raise ShardError(names, None, "no readable sample in this worker's shards (all were skipped)")

    def _batches(self, worker: int, skipped: list) -> Iterator[list[Record]]:
        records = self._records(worker, skipped)
        if self.train and self.config.shuffle_buffer > 0:
            rng = random.Random(derive_seed(self.config.seed, self.epoch, _SAMPLE_SHUFFLE, self.rank, worker))
            records = wds.shuffle(self.config.shuffle_buffer, self.config.shuffle_initial, rng=rng)(records)
        batches = self.config.batcher().batches(((r, r.num_nodes) for r in records), flush=not self.train)
        if self.train:
            batches = itertools.islice(batches, self.quota(worker))
        return batches

    def quota(self, worker: int) -> int:
        """Training batches of one logical worker per epoch; the rank's workers sum to epoch_batches."""
        workers = self.config.workers_per_rank
        return self.epoch_batches // workers + (worker < self.epoch_batches % workers)

    # --- batches ----------------------------------------------------------------------------------
    def _collate(self, records: list[Record], ordinal: int, worker: int, skipped: list) -> Batch:
        """Collate; under on_error: skip a record collate rejects is dropped and the rest retried."""
        rng = None
        if self.train and self.config.sign_flip:
            rng = np.random.default_rng(derive_seed(self.config.seed, self.epoch, _SIGN_FLIP, self.rank, worker, ordinal))
        while True:
            try:
                return collate(records, self.config.keys, self.config.path_edges_max_dist, rng)
            except ShardError as err:
                self._skip(err, 1, skipped)
                records = [r for r in records if (r.shard, r.key) != (err.shard, err.key)]
                if not records:
                    raise ShardError(err.shard, err.key, "every graph of a batch was corrupt") from err

    def _items(self, worker: int) -> Iterator[_Item]:
        skipped: list[tuple[str, int]] = []
        done = self.consumed[worker]
        ordinal = 0
        try:
            for records in self._batches(worker, skipped):
                if ordinal >= done:
                    batch = self._collate(records, ordinal, worker, skipped)
                    yield _Item(worker, batch, tuple(skipped))
                skipped.clear()
                ordinal += 1
        except UserError as err:  # ShardError, MissingKeyError: re-raised cleanly by the main process
            yield _Item(worker, None, tuple(skipped), err)
            return
        if ordinal >= done:
            yield _Item(worker, None, tuple(skipped))

    def __iter__(self) -> Iterator[_Item]:
        info = get_worker_info()
        physical = info.id if info is not None else 0
        return self._items((physical + self.rotation) % self.config.workers_per_rank)


class StreamLoader:
    """Iterate for one epoch of batches on this rank; the epoch advances when an iteration ends.

    An iteration that is abandoned part-way continues from where it stopped at the next `iter()`
    (that is the resume position); `set_epoch` starts an epoch afresh. Only one iteration may be
    in progress at a time."""

    def __init__(self, stream: ShardStream, manifest: dict):
        self._stream = stream
        self._manifest = manifest
        self.config = stream.config
        self.epoch = 0
        self._consumed = [0] * self.config.workers_per_rank
        self._next_worker = 0
        self._batches = 0  # batches yielded in this epoch
        self._prepared: tuple[int, Iterator[_Item]] | None = None  # (epoch, its items), started early
        self.skipped = {"events": 0, "samples": 0}

    @property
    def train(self) -> bool:
        return self._stream.train

    @property
    def batches_per_epoch(self) -> int:
        """Training: batches each rank yields per epoch (the same on every rank)."""
        if not self.train:
            raise TypeError("an evaluation loader has no fixed batch count: ranks yield what their shards hold")
        return self._stream.epoch_batches

    def __len__(self) -> int:
        return self.batches_per_epoch

    @property
    def num_samples(self) -> int:
        """Samples in the split according to the manifest (all ranks together)."""
        return sum(s.samples for s in self._stream.shards)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning at the next iteration."""
        self.epoch = epoch
        self._consumed = [0] * self.config.workers_per_rank
        self._next_worker = 0
        self._batches = 0

    def _positioned_stream(self, epoch: int, consumed: list[int], rotation: int) -> ShardStream:
        stream = copy.copy(self._stream)
        stream.epoch, stream.consumed, stream.rotation = epoch, list(consumed), rotation
        return stream

    def _items(self, epoch: int | None = None) -> Iterator[_Item]:
        """Items from the current position, or from the start of `epoch`."""
        if epoch is None:
            stream = self._positioned_stream(self.epoch, self._consumed, self._next_worker)
        else:
            stream = self._positioned_stream(epoch, [0] * self.config.workers_per_rank, 0)
        if self.config.num_workers == 0:
            return iter(stream)
        return iter(
            DataLoader(
                stream,
                batch_size=None,
                collate_fn=_identity,
                num_workers=self.config.num_workers,
                prefetch_factor=self.config.prefetch_factor,
                pin_memory=self.config.pin_memory,
                persistent_workers=False,
                multiprocessing_context=self.config.start_method,
                worker_init_fn=_ignore_stop_signals,
            )
        )

    def __iter__(self) -> Iterator[Batch]:
        if self.train and self._batches >= self._stream.epoch_batches:
            self.set_epoch(self.epoch + 1)  # a checkpoint taken after an epoch's last batch
        workers = self.config.workers_per_rank
        at_start = self._batches == 0 and not any(self._consumed)
        prepared, self._prepared = self._prepared, None
        items = prepared[1] if prepared is not None and prepared[0] == self.epoch and at_start else self._items()
        for item in items:
            self._consumed[item.worker] += 1
            self._next_worker = (item.worker + 1) % workers
            for message, lost in item.skipped:
                self.skipped["events"] += 1
                self.skipped["samples"] += lost
                log.warning("skipped (on_error: skip), %d sample(s) lost: %s", lost, message)
            if item.error is not None:
                raise item.error
            if item.batch is not None:
                self._batches += 1
                if self.train and self.config.num_workers and self._batches == self._stream.epoch_batches - _NEXT_EPOCH_LOOKAHEAD:
                    # Start the next epoch's workers now: their start and shuffle-buffer fill overlap
                    # the last batches of this epoch instead of stalling training at the boundary.
                    self._prepared = (self.epoch + 1, self._items(epoch=self.epoch + 1))
                yield item.batch
        self.set_epoch(self.epoch + 1)

    # --- resume -----------------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        digest = hashlib.sha256()
        for s in self._stream.shards:
            digest.update(f"{s.name}\0{s.samples}\0{s.sha256}\n".encode())
        return digest.hexdigest()[:16]

    def _setup(self) -> dict:
        """Everything the batch sequence depends on besides the position: a resume must match it."""
        s = self._stream
        stream_config = {k: v for k, v in asdict(self.config).items() if k not in _NOT_IN_STREAM}
        setup = {"train": s.train, "rank": s.rank, "world_size": s.world_size, "epoch_batches": s.epoch_batches,
                 "shards": self._fingerprint(), **stream_config}
        return json.loads(json.dumps(setup))  # tuples → lists: equal to itself after any checkpoint format

    def state_dict(self) -> dict:
        """This rank's position (save one per rank). Plain values: JSON- and torch.save-safe."""
        position = {"epoch": self.epoch, "consumed": list(self._consumed), "next_worker": self._next_worker, "batches": self._batches}
        return {**position, "skipped": dict(self.skipped), "setup": self._setup()}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where `state` was taken; the run must match in everything the stream depends on."""
        current, saved = self._setup(), state.get("setup", {})
        for key, value in current.items():
            if saved.get(key) != value:
                raise UserError(f"loader state: written with {key}={saved.get(key)!r}, this run has {value!r}; an exact resume needs the same")
        self._prepared = None
        self.epoch = int(state["epoch"])
        self._consumed = [int(c) for c in state["consumed"]]
        self._next_worker = int(state["next_worker"])
        self._batches = int(state["batches"])
        self.skipped = dict(state["skipped"])

    # --- evaluation support -----------------------------------------------------------------------
    def filler_batch(self) -> Batch:
        """A one-node batch with idx −1 and no labels, shaped like this loader's batches: what a rank
        that has run out of evaluation data feeds the model while others finish (see lockstep)."""
        return collate([filler_record(self._manifest, self._stream.record_keys)], self.config.keys, self.config.path_edges_max_dist)


def filler_record(manifest: dict, keys: tuple[str, ...]) -> Record:
    """A one-node record with every key in `keys`, its dimensions read from the manifest."""
    transform, features, task = manifest.get("transform", {}), manifest.get("features", {}), manifest.get("task", {})
    dims = {
        schema.SVD_PE: ("transform.svd_rank", transform.get("svd_rank")),
        schema.LAP_PE: ("transform.lap_k", transform.get("lap_k")),
        schema.LAP_EIGVAL: ("transform.lap_k", transform.get("lap_k")),
        schema.Y: ("task.num_targets", task.get("num_targets")),
    }
    for key in keys:
        if key in dims and dims[key][1] is None:
            raise UserError(f"{manifest.get('_dir', 'manifest')}: no {dims[key][0]}, so a filler batch cannot be shaped like the real ones")
    svd_rank, lap_k, targets = (int(transform.get("svd_rank") or 0), int(transform.get("lap_k") or 0), int(task.get("num_targets") or 0))
    arrays = {
        schema.X: np.zeros((1, len(features.get("node", schema.ATOM_FEATURE_DIMS))), np.uint8),
        schema.EDGE_INDEX: np.zeros((2, 0), np.int16),
        schema.EDGE_ATTR: np.zeros((0, len(features.get("edge", schema.BOND_FEATURE_DIMS))), np.uint8),
        schema.SPD: np.zeros((1, 1), np.uint8),
        schema.PRED: np.full((1, 1), schema.pred_sentinel(np.dtype(np.uint8)), np.uint8),
        schema.IN_DEGREE: np.zeros(1, np.uint8),
        schema.OUT_DEGREE: np.zeros(1, np.uint8),
        schema.SVD_PE: np.zeros((1, 2 * svd_rank), np.float16),
        schema.LAP_PE: np.zeros((1, lap_k), np.float16),
        schema.LAP_EIGVAL: np.zeros(lap_k, np.float16),
        schema.Y: np.full(targets, np.nan, np.float32),
        schema.NODE_Y: np.full(1, np.nan, np.float32),
    }
    required = (schema.X, schema.EDGE_INDEX, schema.EDGE_ATTR, *keys)
    return Record("filler", "(filler)", 1, FILLER_IDX, {k: arrays[k] for k in required})


# --- construction ------------------------------------------------------------------------------------
#: Which manifest transform/task entry tells whether the shards hold a key: key → (section, entry).
_PRODUCED_IF = {
    schema.SPD: ("transform", "spd"), schema.PRED: ("transform", "spd"),
    schema.IN_DEGREE: ("transform", "degree"), schema.OUT_DEGREE: ("transform", "degree"),
    schema.SVD_PE: ("transform", "svd_rank"), schema.LAP_PE: ("transform", "lap_k"), schema.LAP_EIGVAL: ("transform", "lap_k"),
    schema.Y: ("task", "num_targets"),
}


def _check_manifest(manifest: dict, keys: tuple[str, ...]) -> None:
    where = manifest.get("_dir", "manifest")
    if manifest.get("schema_version") != schema.SCHEMA_VERSION:
        raise UserError(f"{where}: shards have schema_version {manifest.get('schema_version')!r}, this loader reads {schema.SCHEMA_VERSION}; re-shard")
    for key in keys:
        section, entry = _PRODUCED_IF.get(key, (None, None))
        value = manifest.get(section, {}).get(entry) if section else None
        if value is not None and not value:
            raise UserError(f"{where}: the shards hold no {key!r}, which this model needs; it is produced by {schema.PRODUCED_BY[key]}")


def estimate_graphs_per_batch(shards: list[ShardEntry], config: LoaderConfig) -> float:
    """Mean graphs per batch of `config`'s batcher on node counts from the first shards (deterministic)."""
    if config.batching == "graphs":
        return float(config.batch_size)
    sizes: list[int] = []
    for entry in shards:
        try:
            for key, members in iter_samples(read_shard(entry, config.verify_checksums), entry.name):
                sizes.append(decode_array(members["x.npy"], "x.npy").shape[0])
        except (ShardError, KeyError, ValueError) as err:
            if config.on_error == "raise":
                raise err if isinstance(err, ShardError) else ShardError(entry.name, None, f"cannot read node counts ({err})")
            continue
        if len(sizes) >= _ESTIMATE_SAMPLES:
            break
    if not sizes:
        raise UserError(f"{shards[0].name}: no readable sample to size batches from")
    rng = random.Random(config.seed)
    batcher, graphs, batches = config.batcher(), 0, 0
    for _ in range(max(1, _ESTIMATE_GRAPHS // len(sizes))):  # several passes, so buckets fill many times
        order = sizes[:]
        rng.shuffle(order)
        for closed in batcher.batches(((n, n) for n in order), flush=False):
            graphs, batches = graphs + len(closed), batches + 1
    return graphs / batches if batches else float(len(sizes))


def build_loader(manifest: dict | str | Path, split: str, config: LoaderConfig, *, train: bool, rank: int | None = None, world_size: int | None = None) -> StreamLoader:
    """A loader over `split` of a manifest (its path, its folder, or `load_manifest`'s dict).

    rank and world_size default to WebDataset's view of the job (RANK/WORLD_SIZE, else
    torch.distributed, else a single process)."""
    if not isinstance(manifest, dict):
        manifest = load_manifest(manifest)
    if rank is None or world_size is None:
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    shards = manifest_shards(manifest, split)
    if not shards:
        raise UserError(f"{manifest.get('_dir', 'manifest')}: split {split!r} has no shards")
    keys = record_keys(config.keys, config.path_edges_max_dist)
    _check_manifest(manifest, keys)
    epoch_batches = 0
    if train:
        slots = world_size * config.workers_per_rank
        if len(shards) < slots:
            log.warning("%s: %d shards for %d rank×worker slots; some slots read the same shard in an epoch", split, len(shards), slots)
        epoch_batches = config.epoch_batches or max(1, int(sum(s.samples for s in shards) / (world_size * estimate_graphs_per_batch(shards, config))))
    stream = ShardStream(shards, config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
    return StreamLoader(stream, manifest)
