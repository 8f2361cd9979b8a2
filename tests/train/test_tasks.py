"""The task interface (tasks.py): graph and node tasks behind one `Task`, and `predict`, the one
loop that makes a split's prediction rows for the trainer and for `gtscale evaluate`: every sample
once, sorted by its key, each row holding its own sample's prediction and label."""

import numpy as np
import pytest
import torch

from gtscale.format import schema
from gtscale.format.manifest import load_manifest
from gtscale.format.tario import iter_shard
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.train.config import DataConfig, TaskConfig, TrainConfig
from gtscale.train.node_task import NodeTask
from gtscale.train.tasks import GraphTask, build_task, predict


def split_loader(shards, split, key):
    config = LoaderConfig(batching="graphs", batch_size=32, num_workers=0, keys=[key], bucketing=False)
    return build_loader(shards, split, config, train=False, rank=0, world_size=1)


def shard_records(shards, split):
    return [r for shard in sorted((shards / split).glob("*.tar")) for _, r in iter_shard(shard)]


def test_graph_rows_are_every_graph_once_with_its_label(tpsa_shards):
    cfg = TrainConfig(data=DataConfig(shards=str(tpsa_shards)), model="egt-small", task=TaskConfig(target_scale=2.0, target_shift=1.0))
    task = build_task(cfg, load_manifest(tpsa_shards))
    assert isinstance(task, GraphTask) and task.target_key == schema.Y and task.calibration_split is None
    constant = lambda batch: (torch.full((batch.num_graphs, 1), 0.5),)  # noqa: E731 (normalised scores)
    idx, y_pred, y_true = predict(task, constant, split_loader(tpsa_shards, "valid", schema.Y), lambda batch: batch)
    labels = {r["meta"]["idx"]: r["y"][0] for r in shard_records(tpsa_shards, "valid")}
    assert idx.tolist() == sorted(labels)
    assert np.array_equal(y_true[:, 0], np.array([labels[i] for i in idx], np.float32))
    assert np.allclose(y_pred, 0.5 * 2.0 + 1.0)  # de-normalised: score × target_scale + target_shift


def test_node_rows_are_every_target_once_with_its_own_score(ego_shards):
    _, shards = ego_shards
    task_cfg = TaskConfig(loss="node_bce", metric="auroc", evaluator="node-anomaly", anomaly_weight=3.0)
    cfg = TrainConfig(data=DataConfig(shards=str(shards), eval_split="val"), model="egt-small", task=task_cfg)
    task = build_task(cfg, load_manifest(shards))
    assert isinstance(task, NodeTask) and task.target_key == schema.TARGET_Y and task.calibration_split == "val" and task.pos_weight == 3.0
    # A "model" scoring each node with its first feature: a row holds its own target's score only
    # if the rows are read at the target nodes and keyed by the right global ids.
    first_feature = lambda batch: (batch.node_feat_float[..., :1].float(),)  # noqa: E731
    idx, y_pred, y_true = predict(task, first_feature, split_loader(shards, "val", schema.TARGET_Y), lambda batch: batch)
    records = {r["meta"]["idx"]: r for r in shard_records(shards, "val")}  # meta.idx: the target's global id
    assert idx.tolist() == sorted(records)
    assert np.array_equal(y_pred[:, 0], np.array([records[i]["node_feat_float"][0, 0] for i in idx], np.float32))  # the target is node 0
    assert np.array_equal(y_true[:, 0], np.array([records[i]["target_y"][0] for i in idx], np.float32))
    # calibrated on the rows themselves = the threshold chosen on this split (the trainer's case)
    assert task.metrics(y_pred, y_true, calibration=(y_pred, y_true)) == pytest.approx(task.metrics(y_pred, y_true))
