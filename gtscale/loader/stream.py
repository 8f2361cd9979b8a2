"""The streaming loader: manifest shards → split by rank and worker → shuffle → bucketed batches.

Build one with `build_loader(manifest, split, LoaderConfig, train=...)` and iterate it; each
iteration is one epoch on this rank and yields `Batch`es.

How shards are dealt to (rank, worker) slots, and what an epoch is in training and in
evaluation, is described in `gtscale.loader.slots`.

Resuming. A worker's stream depends only on (seed, epoch, rank, logical worker), so a position is
how many items each logical worker has delivered plus which worker delivers next.
`state_dict()` records that (per rank: save one per rank); after `load_state_dict()` each worker
replays its stream without collating the items already delivered, and the DataLoader's physical
worker p plays logical worker (p + next) mod num_workers, so its round-robin starts where the
interrupted one stopped. The remaining batches are exactly those of an uninterrupted run. Sign
flips are drawn from a generator seeded per batch, so replay needs no RNG state. Starting workers
draws nothing from the training process's generators either (their base seed comes from a
generator of their own): a resumed run starts them at other steps than the uninterrupted one, and
its dropout draws, restored from the checkpoint, must not move.

Workers are started afresh for every epoch (no persistent workers): the epoch and the position
travel to them inside the dataset object. In training, the next epoch's workers are started a few
batches before the current epoch ends, so their start-up overlaps training. They are forked from
the rank's fork server (`start_method: forkserver`, the default; `gtscale.loader.workers` says why
a rank is never forked), which has imported the loader once, so a worker starts in milliseconds;
`spawn` would re-import torch in every worker of every epoch. The resume rule relies on the
DataLoader delivering workers' items in round-robin order, which is its default (`in_order`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import torch
import webdataset as wds
from torch.utils.data import DataLoader

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.decode import decode_array
from gtscale.format.manifest import check_readable, load_manifest
from gtscale.format.shardfile import ShardEntry, ShardError, iter_samples, manifest_shards, read_shard
from gtscale.loader.batch import Batch
from gtscale.loader.collate import collate, record_keys
from gtscale.loader.config import LoaderConfig, SeedPurpose, derive_seed
from gtscale.loader.filler import filler_record
from gtscale.loader.slots import ShardStream, identity, ignore_stop_signals, Item
from gtscale.loader.workers import end_workers, worker_context

log = logging.getLogger(__name__)

#: For epoch_batches = 0: node counts read from the first shards, and graphs run through the
#: batcher (in reshuffled passes over those counts) to estimate the mean graphs per batch.
_ESTIMATE_SAMPLES = 2000
_ESTIMATE_GRAPHS = 20_000
#: Training: the next epoch's workers start this many batches before the current epoch ends.
_NEXT_EPOCH_LOOKAHEAD = 8
#: LoaderConfig fields that do not change which batches come out (free to change on resume).
_NOT_IN_STREAM = frozenset({"prefetch_factor", "pin_memory", "start_method", "on_error", "verify_checksums"})


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
        self._prepared: tuple[int, Iterator[Item]] | None = None  # (epoch, its items), started early
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

    def _items(self, epoch: int | None = None) -> Iterator[Item]:
        """Items from the current position, or from the start of `epoch`."""
        if epoch is None:
            stream = self._positioned_stream(self.epoch, self._consumed, self._next_worker)
        else:
            stream = self._positioned_stream(epoch, [0] * self.config.workers_per_rank, 0)
        if self.config.num_workers == 0:
            return iter(stream)
        # The DataLoader draws its workers' base seed from `generator`, by default torch's global one,
        # which the training process's dropout draws from (see Resuming above). The workers' seeds
        # decide no batch: slots.py seeds its shuffles and sign flips itself.
        workers_seed = derive_seed(self.config.seed, stream.epoch, SeedPurpose.WORKER_SEEDS, stream.rank)
        return iter(
            DataLoader(
                stream,
                batch_size=None,
                collate_fn=identity,
                num_workers=self.config.num_workers,
                prefetch_factor=self.config.prefetch_factor,
                pin_memory=self.config.pin_memory,
                persistent_workers=False,
                multiprocessing_context=worker_context(self.config.start_method),
                worker_init_fn=ignore_stop_signals,
                generator=torch.Generator().manual_seed(workers_seed),
            )
        )

    def __iter__(self) -> Iterator[Batch]:
        if self.train and self._batches >= self._stream.epoch_batches:
            self.set_epoch(self.epoch + 1)  # a checkpoint taken after an epoch's last batch
        workers = self.config.workers_per_rank
        at_start = self._batches == 0 and not any(self._consumed)
        prepared, self._prepared = self._prepared, None
        items = prepared[1] if prepared is not None and prepared[0] == self.epoch and at_start else self._items()
        try:
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
        finally:
            end_workers(items)  # now, not when collected: also after an error, or when the consumer stops early
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

    def position(self) -> dict:
        """Where the stream stands now (cheap): what `state_dict(position)` saves. The trainer takes
        one before fetching batches ahead, so that a checkpoint names the first batch not trained on."""
        return {"epoch": self.epoch, "consumed": list(self._consumed), "next_worker": self._next_worker, "batches": self._batches,
                "skipped": dict(self.skipped)}

    def state_dict(self, position: dict | None = None) -> dict:
        """This rank's position, now or at an earlier `position()` (save one per rank). Plain values:
        JSON- and torch.save-safe."""
        return {**(position or self.position()), "setup": self._setup()}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where `state` was taken; the run must match in everything the stream depends on."""
        current, saved = self._setup(), state.get("setup", {})
        for key, value in current.items():
            if saved.get(key) != value:
                raise UserError(f"loader state: written with {key}={saved.get(key)!r}, this run has {value!r}; an exact resume needs the same")
        if self._prepared is not None:
            end_workers(self._prepared[1])
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


# --- construction ------------------------------------------------------------------------------------
def estimate_graphs_per_batch(shards: list[ShardEntry], config: LoaderConfig) -> float:
    """Mean graphs per batch of `config`'s batcher on node counts from the first shards (deterministic)."""
    if config.batching == "graphs":
        return float(config.batch_size)
    sizes: list[int] = []
    for entry in shards:
        try:
            for _key, members in iter_samples(read_shard(entry, config.verify_checksums), entry.name, entry.schema_version):
                features = f"{schema.NODE_FEAT}.npy" if f"{schema.NODE_FEAT}.npy" in members else f"{schema.NODE_FEAT_FLOAT}.npy"  # categorical or continuous
                sizes.append(decode_array(members[features], features).shape[0])
        except (ShardError, KeyError, ValueError) as err:
            if config.on_error == "raise":
                if isinstance(err, ShardError):
                    raise
                raise ShardError(entry.name, None, f"cannot read node counts ({err})") from err
            continue
        if len(sizes) >= _ESTIMATE_SAMPLES:
            break
    if not sizes:
        raise UserError(f"{shards[0].name}: no readable sample to size batches from")
    return mean_graphs_per_batch(sizes, config)


def mean_graphs_per_batch(sizes: list[int], config: LoaderConfig) -> float:
    """Mean graphs per batch of `config`'s batcher over reshuffled passes of these node counts."""
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
    if train and config.max_shards:
        shards = shards[: config.max_shards]
    if not shards:
        raise UserError(f"{manifest.get('_dir', 'manifest')}: split {split!r} has no shards")
    keys = record_keys(config.keys, config.path_edges_max_dist)
    check_readable(manifest, keys)
    epoch_batches = 0
    if train:
        slots = world_size * config.workers_per_rank
        if len(shards) < slots:
            log.warning("%s: %d shards for %d rank×worker slots; some slots read the same shard in an epoch", split, len(shards), slots)
        epoch_batches = config.epoch_batches or max(1, int(sum(s.samples for s in shards) / (world_size * estimate_graphs_per_batch(shards, config))))
    stream = ShardStream(shards, config, train=train, rank=rank, world_size=world_size, epoch_batches=epoch_batches)
    return StreamLoader(stream, manifest)

