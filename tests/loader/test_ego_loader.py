"""Ego-subgraph shards (node_feat_float, node_id, target_pos, target_y) stream through
build_loader and collate into Batch.node_feat_float and the target fields, which agree with the
graph store they were cut from; filler batches of such a loader carry no target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.shardfile import ShardError
from gtscale.graphs.sample import EgoSampler
from gtscale.graphs.splits import ratio_split
from gtscale.graphs.store import GraphStore
from gtscale.loader.collate import collate
from gtscale.loader.config import LoaderConfig
from gtscale.loader.batch import FILLER_IDX
from gtscale.loader.stream import build_loader
from gtscale.train.distributed_eval import target_predictions

EGO_KEYS = [schema.SPD, schema.IN_DEGREE, schema.SVD_PE, schema.TARGET_Y]


def _config(**overrides) -> LoaderConfig:
    return LoaderConfig(**{"node_budget": 128, "num_workers": 0, "keys": EGO_KEYS, "shuffle_buffer": 20, "shuffle_initial": 5, **overrides})


def test_ego_batches_agree_with_the_store(ego_shards):
    store_path, shards = ego_shards
    store = GraphStore.open(store_path)
    sampler = EgoSampler(store.indptr, store.indices, (5, 3), 16, 0)
    loader = build_loader(shards, "train", _config(), train=True, rank=0, world_size=1)
    batches = list(loader)
    assert len(batches) == len(loader) > 1
    features = np.asarray(store.features, np.float32)
    for batch in batches[:4]:
        b, n = batch.node_mask.shape
        assert batch.node_feat.shape == (b, n, 0) and batch.node_feat_float.shape == (b, n, store.manifest["num_features"])
        assert batch.node_feat_float.dtype == torch.float32 and batch.edge_feat.shape == (b, n, n, 1)
        assert batch.target_pos.tolist() == [[0]] * b  # the target is node 0 of its ego subgraph
        assert batch.target_id[:, 0].tolist() == batch.idx.tolist()
        assert batch.target_y_mask.all()
        np.testing.assert_array_equal(batch.target_y[:, 0].numpy(), store.labels[batch.idx.numpy()].astype(np.float32))
        for g, target in enumerate(batch.idx.tolist()):
            sub = sampler.sample([target])[0]
            k = len(sub.nodes)
            assert batch.node_mask[g].sum() == k
            np.testing.assert_array_equal(batch.node_feat_float[g, :k].numpy(), features[sub.nodes])
            assert not batch.node_feat_float[g, k:].any(), "padding nodes are zero"
            adjacency = np.zeros((n, n), np.int64)
            adjacency[sub.edge_index[0], sub.edge_index[1]] = 1
            np.testing.assert_array_equal(batch.edge_feat[g, :, :, 0].numpy(), adjacency)  # 1 = an edge, 0 = none


def test_ego_evaluation_sees_each_target_once_and_filler_has_none(ego_shards):
    store_path, shards = ego_shards
    store = GraphStore.open(store_path)
    val = ratio_split(store.labels, 0.4, 0)["val"]
    loader = build_loader(shards, "val", _config(num_workers=2, start_method="fork"), train=False, rank=0, world_size=1)
    ids = [i for batch in loader for i in batch.target_id[:, 0].tolist()]
    assert sorted(ids) == val.tolist() and len(ids) == loader.num_samples
    filler = loader.filler_batch()
    assert filler.node_feat_float.shape == (1, 1, store.manifest["num_features"])
    assert filler.target_id.tolist() == [[FILLER_IDX]] and not filler.target_y_mask.any()
    node_values = torch.arange(1.0, 2.0)[None, :, None]
    rows, values = target_predictions(filler, node_values)
    assert rows.tolist() == [FILLER_IDX] and values.tolist() == [[1.0]]


def _record(key: str, n: int, targets: list[int], ids: list[int], labels: list[float]) -> Record:
    return Record(key, "s.tar", n, ids[targets[0]] if targets else -1, {
        schema.NODE_FEAT_FLOAT: np.full((n, 2), float(n), np.float16),
        schema.EDGE_INDEX: np.array([[0], [n - 1]], np.int16),
        schema.TARGET_POS: np.array(targets, np.int16),
        schema.TARGET_Y: np.array(labels, np.float32),
        schema.NODE_ID: np.array(ids, np.int64),
    })


def test_several_targets_per_graph_pad_with_filler_ids_and_pick_their_rows():
    records = [_record("a", 3, [2, 0], [10, 11, 12], [1.0, np.nan]), _record("b", 2, [1], [20, 21], [0.0])]
    batch = collate(records, [schema.TARGET_Y])
    assert batch.target_pos.tolist() == [[2, 0], [1, 0]]
    assert batch.target_id.tolist() == [[12, 10], [21, FILLER_IDX]]
    assert batch.target_y_mask.tolist() == [[True, False], [True, False]]
    assert batch.target_y.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    node_values = torch.arange(6.0).reshape(2, 3)  # graph g, node j → 3g + j
    rows, values = target_predictions(batch, node_values)
    assert rows.tolist() == [12, 10, 21, FILLER_IDX] and values.tolist() == [2.0, 0.0, 4.0, 3.0]


def test_a_batch_never_mixes_categorical_and_continuous_features():
    molecule = Record("m", "mol.tar", 2, 0, {
        schema.NODE_FEAT: np.zeros((2, 9), np.uint8), schema.EDGE_INDEX: np.zeros((2, 0), np.int16), schema.EDGE_FEAT: np.zeros((0, 3), np.uint8),
    })
    with pytest.raises(ShardError, match="s.tar: sample a: has node_feat_float .continuous. node features, others in its batch have node_feat .categorical."):
        collate([molecule, _record("a", 2, [0], [5, 6], [1.0])])


WORLD_SIZE = 2


def _rank_main(rank: int, init_file: str, shards: str, out_dir: str) -> None:
    import datetime
    import json
    from pathlib import Path

    import torch.distributed as dist

    from gtscale.train.distributed_eval import gather_predictions, lockstep

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60))
    loader = build_loader(shards, "val", _config(num_workers=2, start_method="fork"), train=False)  # rank, world from torch.distributed
    ids, values, local = [], [], []
    for batch in lockstep(loader, loader.filler_batch()):
        # the "model": a node head that outputs each node's first feature
        rows, predicted = target_predictions(batch, batch.node_feat_float[..., 0])
        ids.append(rows)
        values.append(predicted)
        local += [i for i in rows.tolist() if i != FILLER_IDX]
    gathered_ids, gathered = gather_predictions(ids, values, expected=loader.num_samples)
    result = {"local": local, "ids": gathered_ids.tolist(), "values": gathered.tolist()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_two_ranks_evaluate_each_target_node_once_keyed_by_global_id(ego_shards, tmp_path):
    import json

    import torch.multiprocessing as mp

    store_path, shards = ego_shards
    mp.spawn(_rank_main, args=(str(tmp_path / "init"), str(shards), str(tmp_path)), nprocs=WORLD_SIZE, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]
    store = GraphStore.open(store_path)
    val = ratio_split(store.labels, 0.4, 0)["val"]
    assert all(r["local"] for r in ranks), "both ranks took part"
    assert sorted(ranks[0]["local"] + ranks[1]["local"]) == val.tolist(), "each target on exactly one rank × worker"
    for r in ranks:
        assert r["ids"] == val.tolist()
        np.testing.assert_array_equal(np.array(r["values"], np.float32), np.asarray(store.features[val, 0], np.float32))
