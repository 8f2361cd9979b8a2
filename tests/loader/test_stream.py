"""The streaming loader in one process with real DataLoader workers: determinism, exact resume,
exactly-once evaluation, equal training batch counts, and bad input (2-rank runs: test_stream_distributed)."""

from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from gtscale.config import from_dict
from gtscale.format import schema
from gtscale.format.decode import MissingKeyError
from gtscale.format.shardfile import ShardError
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.errors import UserError

from shard_fixtures import OPTIONS, SHARD_SIZES, nci_records, write_dataset

KEYS = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.LAP_PE, schema.Y]
CONFIG = LoaderConfig(node_budget=256, shuffle_buffer=60, shuffle_initial=10, num_workers=2, keys=KEYS, path_edges_max_dist=3)


def _arrays(batches) -> list[dict[str, np.ndarray]]:
    return [{f.name: getattr(b, f.name).numpy() for f in fields(b) if getattr(b, f.name) is not None} for b in batches]


def assert_same_batches(a, b) -> None:
    a, b = _arrays(a), _arrays(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def _idx(batches) -> list[int]:
    return [int(i) for b in batches for i in b.idx]


def test_one_seed_gives_identical_batches_and_epochs_differ(nci_shards):
    first = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    second = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    epoch0 = list(first)
    assert len(epoch0) == len(first) > 4
    assert_same_batches(epoch0, list(second))
    epoch1 = list(first)
    assert first.epoch == 2
    assert _idx(epoch0) != _idx(epoch1), "shard order and shuffle are reseeded per epoch"
    other = build_loader(nci_shards, "train", replace(CONFIG, seed=1), train=True, rank=0, world_size=1)
    assert _idx(list(other)) != _idx(epoch0)


@pytest.mark.parametrize("train, stops", [(True, [1, 4, -2]), (False, [2, 5, -4, -1])])
def test_a_restored_loader_yields_the_remaining_batches_of_an_uninterrupted_one(nci_shards, train, stops):
    split = "train" if train else "valid"
    make = lambda: build_loader(nci_shards, split, CONFIG, train=train, rank=0, world_size=1)  # noqa: E731
    full = list(make())
    assert len(full) > 8
    for stop in (s % len(full) for s in stops):  # negative: counted from the end, after workers ran dry
        interrupted = make()
        iterator = iter(interrupted)
        head = [next(iterator) for _ in range(stop)]
        state = json.loads(json.dumps(interrupted.state_dict()))  # survives a checkpoint round trip
        del iterator
        resumed = make()
        resumed.load_state_dict(state)
        assert_same_batches(head + list(resumed), full)


def test_a_state_taken_after_the_last_batch_resumes_at_the_next_epoch(nci_shards):
    uninterrupted = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    list(uninterrupted)
    expected = list(uninterrupted)  # epoch 1
    interrupted = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    iterator = iter(interrupted)
    for _ in range(len(interrupted)):
        next(iterator)
    state = interrupted.state_dict()
    resumed = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    resumed.load_state_dict(state)
    assert_same_batches(list(resumed), expected)
    assert resumed.epoch == 2


def test_a_state_from_another_setup_is_refused(nci_shards):
    state = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1).state_dict()
    other = build_loader(nci_shards, "train", replace(CONFIG, num_workers=3), train=True, rank=0, world_size=1)
    with pytest.raises(UserError, match="num_workers=2, this run has 3"):
        other.load_state_dict(state)


@pytest.mark.parametrize("num_workers", [0, 3])
def test_evaluation_yields_every_sample_once(nci_shards, nci_by_idx, num_workers):
    loader = build_loader(nci_shards, "valid", replace(CONFIG, num_workers=num_workers), train=False, rank=0, world_size=1)
    seen = _idx(loader)
    expected = list(nci_by_idx)[sum(SHARD_SIZES["train"]) : sum(SHARD_SIZES["train"]) + sum(SHARD_SIZES["valid"])]
    assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_training_ranks_yield_equal_batch_counts_over_uneven_shards(nci_shards, world_size):
    config = replace(CONFIG, num_workers=0, path_edges_max_dist=0)
    counts, lengths = [], []
    for rank in range(world_size):  # 5 uneven shards: never an even deal, with 4 ranks some share
        loader = build_loader(nci_shards, "train", config, train=True, rank=rank, world_size=world_size)
        counts.append(sum(1 for _ in loader))
        lengths.append(len(loader))
    assert len(set(counts)) == 1 and counts == lengths and counts[0] > 0


def test_filler_batch_is_shaped_like_real_batches(nci_shards):
    loader = build_loader(nci_shards, "valid", CONFIG, train=False, rank=0, world_size=1)
    real, filler = next(iter(loader)), loader.filler_batch()
    node_dims = {"node_feat": 1, "node_mask": 1, "edge_feat": 2, "spd": 2, "in_degree": 1, "out_degree": 1, "svd_pe": 1,
                 "lap_pe": 1, "path_edges": 2, "node_y": 1, "node_y_mask": 1}
    for f in fields(real):
        a, b = getattr(real, f.name), getattr(filler, f.name)
        assert (a is None) == (b is None), f.name
        if a is not None:
            feature_dims = 1 + node_dims.get(f.name, 0)
            assert a.dtype == b.dtype and a.shape[feature_dims:] == b.shape[feature_dims:], f.name
    assert filler.idx.tolist() == [-1] and not filler.y_mask.any() and filler.node_mask.all()


# --- bad input ---------------------------------------------------------------------------------------

def _corrupt_byte(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_checksum_mismatch_stops_the_loader_naming_the_shard(nci_shards_copy):
    _corrupt_byte(nci_shards_copy / "valid" / "valid-000002.tar", 5000)
    loader = build_loader(nci_shards_copy, "valid", CONFIG, train=False, rank=0, world_size=1)
    with pytest.raises(ShardError, match=r"^valid/valid-000002.tar: sha256 .* does not match the manifest"):
        list(loader)


def test_skip_mode_skips_counts_and_logs_a_corrupt_shard(nci_shards_copy, caplog):
    _corrupt_byte(nci_shards_copy / "valid" / "valid-000002.tar", 5000)
    loader = build_loader(nci_shards_copy, "valid", replace(CONFIG, on_error="skip"), train=False, rank=0, world_size=1)
    with caplog.at_level(logging.WARNING, logger="gtscale.loader.stream"):
        seen = _idx(loader)
    lost = SHARD_SIZES["valid"][2]
    assert len(seen) == len(set(seen)) == sum(SHARD_SIZES["valid"]) - lost
    assert loader.skipped == {"events": 1, "samples": lost}
    assert any("valid/valid-000002.tar: sha256" in r.getMessage() for r in caplog.records)


def _member_offset(path, member: str) -> int:
    data = path.read_bytes()
    return data.index(member.encode()) + 512  # the member's data follows its 512-byte header


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_corrupt_sample_is_named_or_skipped_alone(nci_shards_copy, on_error):
    shard = nci_shards_copy / "valid" / "valid-000001.tar"
    keys = sorted({name.split(".")[0] for name in __import__("tarfile").open(shard).getnames()})
    victim = keys[3]
    _corrupt_byte(shard, _member_offset(shard, f"{victim}.svd_pe.npy") + 1)  # breaks the .npy magic
    config = replace(CONFIG, on_error=on_error, verify_checksums=False)
    loader = build_loader(nci_shards_copy, "valid", config, train=False, rank=0, world_size=1)
    if on_error == "raise":
        with pytest.raises(ShardError, match=rf"^valid/valid-000001.tar: sample {victim}: svd_pe.npy: not an .npy array"):
            list(loader)
        return
    seen = _idx(loader)
    assert len(seen) == sum(SHARD_SIZES["valid"]) - 1 and int(victim) not in seen
    assert loader.skipped == {"events": 1, "samples": 1}


def test_a_truncated_shard_is_named_with_its_sample(nci_shards_copy):
    shard = nci_shards_copy / "valid" / "valid-000000.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    loader = build_loader(nci_shards_copy, "valid", replace(CONFIG, verify_checksums=False), train=False, rank=0, world_size=1)
    with pytest.raises(ShardError, match=r"^valid/valid-000000.tar: sample \d{10}: .*(cut short|end-of-archive)"):
        list(loader)
    verified = build_loader(nci_shards_copy, "valid", CONFIG, train=False, rank=0, world_size=1)
    with pytest.raises(ShardError, match=r"^valid/valid-000000.tar: \d+ bytes, the manifest says"):
        list(verified)



def _live_workers() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("ForkServerProcess")]


def test_a_loader_error_ends_its_workers_before_it_reaches_the_caller(nci_shards_copy):
    """The error's traceback holds the epoch's DataLoader iterator for as long as the caller keeps
    it: the workers must not wait for that (torch's own shutdown, when the iterator is finally
    dropped, waited 5 s a worker and then killed them)."""
    shard = nci_shards_copy / "valid" / "valid-000000.tar"
    shard.write_bytes(shard.read_bytes()[:40000])
    loader = build_loader(nci_shards_copy, "valid", replace(CONFIG, verify_checksums=False), train=False, rank=0, world_size=1)
    assert CONFIG.num_workers == 2 and not _live_workers()
    with pytest.raises(ShardError) as caught:
        list(loader)
    assert caught.value is not None and not _live_workers()  # the traceback is still held here
    stopped = iter(build_loader(nci_shards_copy, "train", CONFIG, train=False, rank=0, world_size=1))
    next(stopped)
    assert len(_live_workers()) == 2
    stopped.close()  # a consumer that ends the epoch early
    assert not _live_workers()

def test_a_key_the_model_needs_but_the_shards_lack_is_named_with_its_producer(tmp_path):
    no_lap = replace(OPTIONS, lap_k=0)
    root = write_dataset(tmp_path / "nolap", nci_records(30, options=no_lap), {"valid": [30]}, options=no_lap)
    config = replace(CONFIG, keys=[schema.LAP_PE])
    with pytest.raises(UserError, match=r"shards hold no 'lap_pe'.*`gtscale shard --lap-k K` with K > 0"):
        build_loader(root, "valid", config, train=False, rank=0, world_size=1)
    manifest = json.loads((root / "manifest.json").read_text())
    del manifest["transform"]["lap_k"]  # a manifest that does not say: the records do
    (root / "manifest.json").write_text(json.dumps(manifest))
    loader = build_loader(root, "valid", config, train=False, rank=0, world_size=1)
    with pytest.raises(MissingKeyError, match=r"valid/valid-000000.tar: sample \d{10}: record has no 'lap_pe'.*--lap-k K"):
        list(loader)


def test_loader_config_errors_name_the_key():
    with pytest.raises(UserError, match="node_bugdet: unknown key"):
        from_dict(LoaderConfig, {"node_bugdet": 10})
    with pytest.raises(UserError, match="'pred' is not a Batch key"):
        from_dict(LoaderConfig, {"keys": ["pred"]})
    with pytest.raises(UserError, match="on_error: 'ignore' is not one of"):
        from_dict(LoaderConfig, {"on_error": "ignore"})
    assert from_dict(LoaderConfig, {"batching": "graphs", "batch_size": 64}).batch_size == 64


def test_next_epoch_started_early_yields_the_same_batches(nci_shards):
    """The next epoch's workers start before the current epoch ends; what they yield must equal a
    fresh iteration of that epoch."""
    continuous = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    list(continuous)  # epoch 0, which starts epoch 1's workers near its end
    assert continuous._prepared is not None and continuous._prepared[0] == 1
    second = list(continuous)
    fresh = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    fresh.set_epoch(1)
    assert_same_batches(second, list(fresh))


@pytest.mark.parametrize("split, train", [("train", True), ("valid", False)])
def test_starting_workers_leaves_the_processs_torch_generator_alone(nci_shards, split, train):
    """Dropout in the training process draws from torch's global generator, which a checkpoint
    saves and a resume restores; a resumed run starts its loader workers at other steps than the
    uninterrupted one (at the resume, not at an epoch's start), so starting them must draw nothing
    from it. A training epoch also starts the next epoch's workers before it ends."""
    loader = build_loader(nci_shards, split, CONFIG, train=train, rank=0, world_size=1)
    before = torch.get_rng_state()
    assert list(loader)
    assert not train or loader._prepared is not None
    assert torch.equal(torch.get_rng_state(), before)
