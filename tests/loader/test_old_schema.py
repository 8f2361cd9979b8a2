"""Shards written before schema version 3, whose records name their keys x, edge_attr, x_float and
target_nodes, load into the very batches that shards of the current names give: the shard reader
renames their members by the manifest's schema_version, and nothing past it sees the old names."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from gtscale.format import schema
from gtscale.format.manifest import load_manifest
from gtscale.format.record_meta import split_meta
from gtscale.format.tario import iter_shard, write_shard
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader

#: What schema versions 1 and 2 called the keys (spelled out here, not read from gtscale: the test
#: holds the format as those shards have it on disk).
OLD_NAMES = {"node_feat": "x", "edge_feat": "edge_attr", "node_feat_float": "x_float", "target_pos": "target_nodes"}


def _write_old(new: Path, old: Path, version: int) -> Path:
    """A copy of the shard folder `new` with the old key names and `version` in its manifest."""
    manifest = json.loads((new / "manifest.json").read_text())
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            samples = [(key, {OLD_NAMES.get(field, field): value for field, value in record.items()})
                       for key, record in iter_shard(new / shard["path"])]
            (old / shard["path"]).parent.mkdir(parents=True, exist_ok=True)
            shard.update(write_shard(old / shard["path"], samples))
    manifest["schema_version"] = version
    (old / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return old


def _batches(shards: Path, split: str, keys: list[str], max_dist: int = 0) -> list:
    config = LoaderConfig(node_budget=256, num_workers=0, keys=keys, path_edges_max_dist=max_dist, sign_flip=False)
    return list(build_loader(shards, split, config, train=False, rank=0, world_size=1))


def _assert_same(old: list, new: list) -> None:
    assert len(old) == len(new) > 1
    for a, b in zip(old, new):
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(x, torch.Tensor):
                assert x.dtype == y.dtype and torch.equal(x, y), field.name
            else:
                assert x == y, field.name


def test_molecule_shards_with_the_old_keys_give_the_same_batches(nci_shards, tmp_path):
    old = _write_old(nci_shards, tmp_path / "old", version=2)
    first = next(iter_shard(old / "train/train-000000.tar"))[1]
    assert {"x", "edge_attr"} <= set(first) and "node_feat" not in first  # the premise: the old names on disk
    keys = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.LAP_PE, schema.Y, schema.NODE_Y]
    _assert_same(_batches(old, "valid", keys, max_dist=3), _batches(nci_shards, "valid", keys, max_dist=3))
    renamed = next(iter_shard(old / "train/train-000000.tar", schema_version=2))[1]
    assert set(renamed) == set(next(iter_shard(nci_shards / "train/train-000000.tar"))[1])
    assert split_meta(load_manifest(old), "test")[0] == split_meta(load_manifest(nci_shards), "test")[0]


def test_ego_shards_with_the_old_keys_give_the_same_batches(ego_shards, tmp_path):
    _, shards = ego_shards
    old = _write_old(shards, tmp_path / "old", version=2)
    keys = [schema.SPD, schema.IN_DEGREE, schema.SVD_PE, schema.TARGET_Y]
    new_batches = _batches(shards, "val", keys)
    assert new_batches[0].node_feat_float is not None and new_batches[0].target_y is not None  # the renamed keys are read
    _assert_same(_batches(old, "val", keys), new_batches)


def test_current_shards_keep_their_names():
    """A current shard's members are read as written: a member named like an old key is not renamed."""
    assert schema.renamed_members(schema.SCHEMA_VERSION) == {}
    assert schema.renamed_members(2)["x.npy"] == "node_feat.npy"
