"""The online loader samples ego subgraphs from the store: 2 ranks × 2 workers draw disjoint target
sets seeded by (seed, epoch), evaluation sees every target once, a resumed iteration yields what the
uninterrupted one would, and its batches equal the ego-shard loader's for the same options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.graphs.online import build_online_loader
from gtscale.graphs.shard_ego import EgoShardOptions
from gtscale.graphs.splits import ratio_split
from gtscale.graphs.store import GraphStore
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.prep.structure import StructureOptions

# the options of the ego_shards fixture (tests/conftest.py)
OPTIONS = EgoShardOptions(StructureOptions(svd_rank=4, lap_k=0), fanouts=(5, 3), max_nodes=16)
KEYS = [schema.SPD, schema.IN_DEGREE, schema.SVD_PE, schema.TARGET_Y]


def _config(**overrides) -> LoaderConfig:
    return LoaderConfig(**{"node_budget": 96, "num_workers": 2, "start_method": "fork", "keys": KEYS, "shuffle_buffer": 16,
                           "shuffle_initial": 4, "seed": 5, **overrides})


@pytest.fixture(scope="module")
def splits(ego_shards):
    return ratio_split(GraphStore.open(ego_shards[0]).labels, 0.4, 0)


def _ids(batches) -> list[int]:
    return [i for b in batches for i in b.target_id[:, 0].tolist()]


def test_slots_draw_disjoint_targets_seeded_by_epoch(ego_shards, splits):
    store, train = ego_shards[0], splits["train"]
    loaders = [build_online_loader(store, train, OPTIONS, _config(), train=True, rank=r, world_size=2) for r in range(2)]
    per_epoch = []
    for epoch in range(2):
        slots = []
        for loader in loaders:
            loader._stream.epoch = epoch
            slots += [loader._stream.slot_targets(w).tolist() for w in range(2)]
        assert sorted(sum(slots, [])) == train.tolist(), "4 slots partition the targets"
        per_epoch.append(slots)
    assert per_epoch[0] != per_epoch[1], "a new permutation each epoch"
    # the batches of one epoch: ranks and workers never share a target (no slot wraps in 3 batches each)
    seen = [_ids(build_online_loader(store, train, OPTIONS, _config(epoch_batches=6), train=True, rank=r, world_size=2)) for r in range(2)]
    assert seen[0] and seen[1] and len(set(seen[0] + seen[1])) == len(seen[0]) + len(seen[1])
    assert set(seen[0] + seen[1]) <= set(train.tolist())


def test_evaluation_sees_every_target_once_over_two_ranks(ego_shards, splits):
    val = splits["val"]
    seen = [_ids(build_online_loader(ego_shards[0], val, OPTIONS, _config(), train=False, rank=r, world_size=2)) for r in range(2)]
    assert seen[0] and seen[1] and sorted(seen[0] + seen[1]) == val.tolist()


def _same(a, b, exact_svd: bool = True) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in ("target_id", "node_feat_float", "spd", "edge_feat", "target_y") + (("svd_pe",) if exact_svd else ()):
            torch.testing.assert_close(getattr(x, name), getattr(y, name), rtol=0, atol=0, msg=name)
        if not exact_svd:  # equal up to the SVD's own freedom (signs, bases of repeated singular values)
            r = x.svd_pe.shape[-1] // 2
            torch.testing.assert_close(x.svd_pe[..., :r] @ x.svd_pe[..., r:].mT, y.svd_pe[..., :r] @ y.svd_pe[..., r:].mT, rtol=0, atol=1e-2)


def test_a_resumed_iteration_yields_what_the_uninterrupted_one_would(ego_shards, splits):
    def loader():
        return build_online_loader(ego_shards[0], splits["train"], OPTIONS, _config(epoch_batches=7), train=True, rank=1, world_size=2)

    whole = loader()
    reference = list(whole) + list(whole)  # epochs 0 and 1
    first = loader()
    head = []
    for batch in first:
        head.append(batch)
        if len(head) == 3:
            break
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    _same(head + list(resumed) + list(resumed), reference)
    other = build_online_loader(ego_shards[0], splits["train"][1:], OPTIONS, _config(epoch_batches=7), train=True, rank=1, world_size=2)
    with pytest.raises(UserError, match="loader state: written with shards="):
        other.load_state_dict(state)


def test_online_batches_equal_the_ego_shard_loaders(ego_shards, splits):
    store, shards = ego_shards
    config = _config(num_workers=0, bucketing=False)
    online = list(build_online_loader(store, splits["val"], OPTIONS, config, train=False, rank=0, world_size=1))
    offline = list(build_loader(shards, "val", config, train=False, rank=0, world_size=1))
    # structure_many batches equal-size subgraphs into one LAPACK call, and the batches differ from
    # the sharder's chunks, so singular vectors may differ by the SVD's freedom; the rest is exact
    _same(online, offline, exact_svd=False)
    filler = build_online_loader(store, splits["val"], OPTIONS, config, train=False, rank=0, world_size=1).filler_batch()
    assert filler.target_id.tolist() == [[-1]] and filler.svd_pe.shape == (1, 1, 8)


def test_bad_targets_and_missing_structure_are_refused(ego_shards, splits):
    store = ego_shards[0]
    with pytest.raises(UserError, match="target node ids must lie in 0..599"):
        build_online_loader(store, np.array([0, 600]), OPTIONS, _config(), train=False, rank=0, world_size=1)
    no_svd = EgoShardOptions(StructureOptions(svd_rank=0, lap_k=0), fanouts=(5, 3), max_nodes=16)
    with pytest.raises(UserError, match="no 'svd_pe'"):
        build_online_loader(store, splits["val"], no_svd, _config(), train=False, rank=0, world_size=1)


def test_a_pickled_stream_opens_its_own_store(ego_shards, splits):
    """Spawned workers receive the stream pickled: without the parent's memory maps or sampler."""
    import pickle

    loader = build_online_loader(ego_shards[0], splits["val"], OPTIONS, _config(num_workers=0), train=False, rank=0, world_size=1)
    stream = loader._stream
    first = next(stream._records(0, []))
    copy = pickle.loads(pickle.dumps(stream))
    assert copy._sampler is None and stream._sampler is not None
    again = next(copy._records(0, []))
    assert again.idx == first.idx and np.array_equal(again.arrays[schema.NODE_ID], first.arrays[schema.NODE_ID])
