"""data.train_split may join splits ("train+valid"): the loader reads every part's samples, target
scaling pools the parts' statistics, an anomaly weight sums their label counts, and the config check
names a part the shards lack."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import load_manifest
from gtscale.format.target_stats import recorded_stats, split_target_stats
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.train.config import TaskConfig
from gtscale.train.node_task import resolve_anomaly_weight

from launcher import write_config
from shard_fixtures import SHARD_SIZES
from test_induced_node_task import graph_config

CONFIG = LoaderConfig(node_budget=256, shuffle_buffer=60, shuffle_initial=10, num_workers=0, keys=[schema.Y])


def _idx(loader) -> list[int]:
    return [int(i) for batch in loader for i in batch.idx]


def test_a_union_yields_every_sample_of_each_part_once(nci_shards, nci_by_idx):
    seen = _idx(build_loader(nci_shards, "train+valid", CONFIG, train=False, rank=0, world_size=1))
    n = sum(SHARD_SIZES["train"]) + sum(SHARD_SIZES["valid"])
    assert sorted(seen) == sorted(list(nci_by_idx)[:n])


def test_training_on_a_union_counts_its_epoch_over_both_parts(nci_shards):
    train = build_loader(nci_shards, "train", CONFIG, train=True, rank=0, world_size=1)
    union = build_loader(nci_shards, "train+valid", CONFIG, train=True, rank=0, world_size=1)
    assert union.num_samples == sum(SHARD_SIZES["train"]) + sum(SHARD_SIZES["valid"]) == train.num_samples + sum(SHARD_SIZES["valid"])
    assert union.batches_per_epoch > train.batches_per_epoch


def test_a_union_with_a_missing_part_names_that_part(nci_shards):
    with pytest.raises(UserError, match="no split 'dev'"):
        build_loader(nci_shards, "train+dev", CONFIG, train=True, rank=0, world_size=1)


def test_pooled_statistics_are_those_of_the_parts_values_together():
    rng = np.random.default_rng(0)
    parts = {"train": rng.normal(3.0, 2.0, size=(40, 2)), "valid": rng.normal(-1.0, 0.5, size=(7, 2))}
    parts["valid"][2, 1] = np.nan  # a blank cell counts in neither
    parts["train"][:, 1] = np.nan  # a target labelled in one part only
    manifest = {"task": {"target_stats": split_target_stats(parts)}}
    pooled = recorded_stats(manifest, "train+valid")
    together = split_target_stats({"all": np.concatenate([parts["train"], parts["valid"]])})["all"]
    assert pooled["count"] == together["count"] == [47, 6]
    np.testing.assert_allclose(pooled["mean"], together["mean"], rtol=1e-12)
    np.testing.assert_allclose(pooled["std"], together["std"], rtol=1e-12)
    assert recorded_stats(manifest, "train") == manifest["task"]["target_stats"]["train"]
    assert recorded_stats(manifest, "train+test") is None  # a part without statistics: none pooled


def test_auto_target_scaling_of_a_union_reads_the_pooled_statistics(nci_shards):
    from gtscale.train.target_scaling import resolve_target_scaling

    manifest = load_manifest(nci_shards)
    shift, scale = resolve_target_scaling(TaskConfig(loss="mse", metric="rmse", evaluator="regression"), manifest, "train+valid", 2)
    pooled = recorded_stats(manifest, "train+valid")
    assert shift == pooled["mean"] and scale == pooled["std"] != recorded_stats(manifest, "train")["std"]


def test_an_auto_anomaly_weight_of_a_union_sums_its_parts_counts():
    task = TaskConfig(loss="node_bce", metric="auroc", evaluator="node-anomaly")
    manifest = {"task": {"label_counts": {"train": {"normal": 90, "anomalous": 10}, "valid": {"normal": 30, "anomalous": 10}}}}
    assert resolve_anomaly_weight(task, manifest, "train") == 9.0
    assert resolve_anomaly_weight(task, manifest, "train+valid") == 6.0
    with pytest.raises(UserError, match="label_counts.test"):
        resolve_anomaly_weight(task, manifest, "train+test")
    assert resolve_anomaly_weight(replace(task, anomaly_weight=2.0), manifest, "train+test") == 2.0


@pytest.mark.parametrize("overrides,message", [
    (["data.train_split=train+dev"], "data.train_split: 'dev' is not a split of"),
    (["data.eval_split=valid+test"], "data.eval_split: 'valid+test' joins splits; the run is evaluated on one"),
])
def test_the_config_check_names_what_a_union_lacks(tpsa_shards, tmp_path, overrides, message):
    from gtscale.train.preflight import load_train_config

    path = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run")
    assert load_train_config(path, ["data.train_split=train+valid"]).data.train_split == "train+valid"
    with pytest.raises(UserError, match=re.escape(message)):
        load_train_config(path, overrides)


def test_a_graph_stores_node_splits_are_not_joined(tmp_path):
    from gtscale.graphs.store import build_store
    from gtscale.graphs.synthetic import synthetic_source
    from gtscale.train.preflight import load_train_config

    build_store(synthetic_source(200, 1000, seed=1, anomaly_ratio=0.1), tmp_path / "store", progress=False)
    path = graph_config(tmp_path / "c.yaml", tmp_path / "store", tmp_path / "run")
    with pytest.raises(UserError, match="joins splits, which shards support"):
        load_train_config(path, ["data.train_split=train+val"])
