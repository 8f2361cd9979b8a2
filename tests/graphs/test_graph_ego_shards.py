"""`gtscale shard graph-ego` writes one verified record per target of each split, equal to the sampler
plus structure, with the manifest machinery of the molecular shards (resumable, inspect --verify)."""

import numpy as np
import pytest

from gtscale.cli import main
from gtscale.format import schema
from gtscale.format.manifest import load_manifest
from gtscale.format.tario import iter_shard
from gtscale.graphs.sample import EgoSampler, ego_structures
from gtscale.graphs.splits import ratio_split
from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.prep.structure import StructureOptions


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("ego") / "store"
    build_store(synthetic_source(1500, 9000, seed=2), out, feature_dtype="float16", progress=False)
    return out


def _shard(store_path, out, *extra, split=("--train-ratio", "0.1")):
    return main(["shard", "graph-ego", "--graph", str(store_path), "--out", str(out), *split, "--shard-size", "100",
                 "--fanouts", "6,4", "--max-nodes", "24", "--no-progress", *extra])


def test_every_target_once_equal_to_sampler_and_structure(store_path, tmp_path, capsys):
    assert _shard(store_path, tmp_path / "shards", "--workers", "2") == 0
    manifest = load_manifest(tmp_path / "shards")
    assert manifest["schema_version"] == schema.SCHEMA_VERSION == 3
    store = GraphStore.open(store_path)
    splits = ratio_split(store.labels, 0.1, 0)
    for split, targets in splits.items():
        labels = store.labels[targets]
        counts = {"unknown": int((labels < 0).sum()), "normal": int((labels == 0).sum()), "anomalous": int((labels == 1).sum())}
        assert manifest["task"]["label_counts"][split] == counts and counts["anomalous"] > 0
    sampler = EgoSampler(store.indptr, store.indices, (6, 4), 24, 0)
    for split, targets in splits.items():
        records = [rec for shard in manifest["splits"][split]["shards"] for _, rec in iter_shard(tmp_path / "shards" / shard["path"])]
        assert [r[schema.META]["idx"] for r in records] == targets.tolist()  # every target once, in order
        for rec in records[:: max(1, len(records) // 15)]:
            sub = sampler.sample([rec[schema.META]["idx"]])[0]
            np.testing.assert_array_equal(rec[schema.NODE_ID], sub.nodes)
            np.testing.assert_array_equal(rec[schema.EDGE_INDEX], sub.edge_index)
            np.testing.assert_array_equal(rec[schema.NODE_FEAT_FLOAT], store.features[sub.nodes])
            assert rec[schema.NODE_FEAT_FLOAT].dtype == np.float16 and rec[schema.TARGET_POS].tolist() == [0]
            assert rec[schema.TARGET_Y].tolist() == [float(store.labels[sub.target])]
            st = ego_structures([sub], StructureOptions(svd_rank=8, lap_k=0))[0]
            for key, value in st.items():
                np.testing.assert_array_equal(rec[key], value, err_msg=key)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "shards"), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().out


def test_rerun_redoes_only_missing_shards(store_path, tmp_path):
    assert _shard(store_path, tmp_path / "s") == 0
    shards = sorted((tmp_path / "s").glob("*/*.tar"))
    before = {p: p.stat().st_mtime_ns for p in shards}
    shards[1].unlink()
    assert _shard(store_path, tmp_path / "s") == 0
    assert shards[1].is_file()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items() if p != shards[1])
    assert main(["inspect", str(tmp_path / "s"), "--verify"]) == 0


def test_mask_column_needs_stored_masks(store_path, tmp_path, capsys):
    assert _shard(store_path, tmp_path / "m", split=("--mask-column", "0")) == 2
    assert "mask split needs train, val and test" in capsys.readouterr().err


def test_loader_accepts_schema_v1_to_v3_manifests():
    """Schema v2 only added keys, v3 only renamed them: manifests of version-1 and -2 shards still
    pass the loader's check; a later version does not."""
    from gtscale.errors import UserError
    from gtscale.format.manifest import check_readable

    for version in (1, 2, 3):
        check_readable({"schema_version": version, "_dir": "d"}, ())
    with pytest.raises(UserError, match="schema_version 4"):
        check_readable({"schema_version": 4, "_dir": "d"}, ())


def test_records_gather_features_and_labels_per_batch(store_path):
    """subgraph_records gathers a batch's features and labels at once: each record still holds its
    own nodes' features (float16) and its target's label, NaN where the label is unknown (−1)."""
    from dataclasses import replace

    from gtscale.graphs.shard_ego import EgoShardOptions, subgraph_records

    store = GraphStore.open(store_path)
    labels = np.asarray(store.labels).copy()
    labels[::3] = -1
    store = replace(store, labels=labels)
    targets = np.arange(0, 60, 2)
    subs = EgoSampler(store.indptr, store.indices, (6, 4), 24, 0).sample(targets)
    records = subgraph_records(store, subs, EgoShardOptions(StructureOptions(svd_rank=0, lap_k=0)))
    assert subgraph_records(store, [], EgoShardOptions()) == []
    for sub, rec in zip(subs, records):
        np.testing.assert_array_equal(rec[schema.NODE_FEAT_FLOAT], np.asarray(store.features[sub.nodes], np.float16))
        assert rec[schema.NODE_FEAT_FLOAT].dtype == np.float16 and rec[schema.NODE_FEAT_FLOAT].shape == (len(sub.nodes), store.features.shape[1])
        expected = np.nan if labels[sub.target] < 0 else float(labels[sub.target])
        np.testing.assert_array_equal(rec[schema.TARGET_Y], np.array([expected], np.float32))
        assert rec[schema.TARGET_Y].dtype == np.float32 and rec[schema.TARGET_Y].shape == (1,)
