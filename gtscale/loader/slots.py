"""One slot's pipeline: a (rank, worker) pair's shards → records → shuffle → bucketed batches.

Slots. Every rank runs `num_workers` DataLoader workers (one when loading in-process); a
(rank, worker) pair is a *slot*. Shards are dealt to slots with WebDataset's rule: rank r takes
every world_size-th shard starting at r (`split_by_node`), worker w every num_workers-th of those
(`split_by_worker`). The same `islice` rule is applied here with explicit ids instead of calling
those functions, because resuming needs a worker's *logical* id to differ from the DataLoader's
(see Resuming in `gtscale.loader.stream`).

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
numbers of batches. `gtscale.train.distributed_eval.lockstep` pads the shorter ranks with
`filler_batch()` (idx −1, no labels) when every rank must run the same number of forward passes
(ZeRO-3), and `gather_predictions` collects (idx, prediction) pairs from all ranks.
"""

from __future__ import annotations

import itertools
import random
import signal
from typing import Iterator, NamedTuple

import numpy as np
import webdataset as wds
from torch.utils.data import IterableDataset, get_worker_info

from gtscale.errors import UserError
from gtscale.format.decode import Record, decode_record
from gtscale.format.shardfile import ShardEntry, ShardError, iter_samples, read_shard
from gtscale.loader.batch import Batch
from gtscale.loader.collate import collate, record_keys
from gtscale.loader.config import LoaderConfig, SeedPurpose, derive_seed


class Item(NamedTuple):
    """What a worker sends: a batch, or (batch None) the end of its stream or an error."""

    worker: int  # logical worker id within the rank
    batch: Batch | None
    skipped: tuple[tuple[str, int], ...]  # (message, samples lost) for data skipped since the previous item
    error: Exception | None = None


def ignore_stop_signals(worker_id: int) -> None:
    """Workers leave SIGUSR1 (SLURM's warning before a time limit or preemption, which it may send
    to every process of a job step) to the training process, which checkpoints and then ends them.

    SIGTERM is left alone: it is how torch and multiprocessing end workers (an ignored SIGTERM
    hangs the exit), so a SIGTERM sent to the whole process group (scancel) still kills the workers;
    the training process expects that and checkpoints all the same (gtscale/train/stop_signals.py)."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def identity(item):
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
            names = [d["url"] for d in wds.SimpleShardList([s.name for s in self.shards], seed=derive_seed(self.config.seed, self.epoch, SeedPurpose.SHARD_ORDER))]
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
        samples, produced = iter_samples(data, entry.name, entry.schema_version), 0
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
            rng = random.Random(derive_seed(self.config.seed, self.epoch, SeedPurpose.SAMPLE_SHUFFLE, self.rank, worker))
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
            rng = np.random.default_rng(derive_seed(self.config.seed, self.epoch, SeedPurpose.SIGN_FLIP, self.rank, worker, ordinal))
        while True:
            try:
                batch = collate(records, self.config.keys, self.config.path_edges_max_dist, rng)
                return batch.padded(*self.config.static_shape(batch.max_graph_nodes)) if self.config.pad_to_bucket else batch
            except ShardError as err:
                self._skip(err, 1, skipped)
                records = [r for r in records if (r.shard, r.key) != (err.shard, err.key)]
                if not records:
                    raise ShardError(err.shard, err.key, "every graph of a batch was corrupt") from err

    def _items(self, worker: int) -> Iterator[Item]:
        skipped: list[tuple[str, int]] = []
        done = self.consumed[worker]
        ordinal = 0
        try:
            for records in self._batches(worker, skipped):
                if ordinal >= done:
                    batch = self._collate(records, ordinal, worker, skipped)
                    yield Item(worker, batch, tuple(skipped))
                skipped.clear()
                ordinal += 1
        except UserError as err:  # ShardError, MissingKeyError: re-raised cleanly by the main process
            yield Item(worker, None, tuple(skipped), err)
            return
        if ordinal >= done:
            yield Item(worker, None, tuple(skipped))

    def __iter__(self) -> Iterator[Item]:
        info = get_worker_info()
        physical = info.id if info is not None else 0
        return self._items((physical + self.rotation) % self.config.workers_per_rank)

