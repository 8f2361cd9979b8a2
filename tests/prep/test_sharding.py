"""End-to-end sharding of the bundled and OGB-layout datasets through the real CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fixtures_ogb import write_ogbg_mol, write_pcqm4mv2
from gtscale.cli import main
from gtscale.format import schema
from gtscale.prep.featurize import featurize_smiles
from gtscale.format.tario import iter_shard


def shard(*args: str) -> int:
    return main(["shard", *args, "--no-progress"])


def read_all(out: Path) -> dict[str, dict[str, dict]]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        split: {key: rec for s in info["shards"] for key, rec in iter_shard(out / s["path"])}
        for split, info in manifest["splits"].items()
    }


def tree_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.tar"))} | {
        "manifest.json": (out / "manifest.json").read_bytes()
    }


@pytest.fixture(scope="module")
def nci(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nci")
    assert shard("nci-tpsa", "--out", str(out), "--shard-size", "700", "--max-nodes", "40") == 0
    return out


def test_manifest_counts_equal_records_read_back(nci):
    manifest = json.loads((nci / "manifest.json").read_text())
    records = read_all(nci)
    for split, info in manifest["splits"].items():
        assert info["samples"] == len(records[split]) == sum(s["samples"] for s in info["shards"])
        assert info["samples"] + sum(info["rejected"].values()) == info["rows"]
    assert sum(i["rows"] for i in manifest["splits"].values()) == 4999
    assert manifest["schema_version"] == schema.SCHEMA_VERSION and manifest["transform"]["svd_rank"] == 8
    assert all(len(s["sha256"]) == 64 for i in manifest["splits"].values() for s in i["shards"])


def test_rejects_are_counted_and_listed(nci):
    manifest = json.loads((nci / "manifest.json").read_text())
    rejected = {}
    for info in manifest["splits"].values():
        for reason, count in info["rejected"].items():
            rejected[reason] = rejected.get(reason, 0) + count
    lines = (nci / "rejects.tsv").read_text().splitlines()
    assert lines[0] == "idx\tsplit\treason"
    assert len(lines) - 1 == sum(rejected.values())
    assert rejected["invalid_smiles"] == 8 and rejected["too_many_nodes"] > 0
    records = read_all(nci)
    assert max(r["meta"]["num_nodes"] for split in records.values() for r in split.values()) <= 40


def test_records_hold_the_contract(nci):
    records = read_all(nci)["valid"]
    key, rec = next(iter(records.items()))
    n = rec["meta"]["num_nodes"]
    assert key == f"{rec['meta']['idx']:010d}"
    expected = {
        "node_feat": (np.uint8, (n, 9)), "edge_feat": (np.uint8, (rec["meta"]["num_edges"], 3)), "spd": (np.uint8, (n, n)),
        "pred": (np.uint8, (n, n)), "svd_pe": (np.float16, (n, 16)), "lap_pe": (np.float16, (n, 8)),
        "lap_eigval": (np.float16, (8,)), "y": (np.float32, (1,)), "in_degree": (np.uint8, (n,)),
    }
    for field, (dtype, shape) in expected.items():
        assert rec[field].dtype == dtype and rec[field].shape == shape, field
    assert rec["edge_index"].dtype == np.int16


def test_same_output_whatever_the_worker_count_or_parts(nci, tmp_path):
    two = tmp_path / "two"
    assert shard("nci-tpsa", "--out", str(two), "--shard-size", "700", "--max-nodes", "40", "--workers", "2") == 0
    assert tree_bytes(two) == tree_bytes(nci)
    parts = tmp_path / "parts"
    for part in (1, 0):
        assert shard("nci-tpsa", "--out", str(parts), "--shard-size", "700", "--max-nodes", "40", "--part", str(part), "--num-parts", "2") == 0
        assert not (parts / "manifest.json").exists()
    assert main(["merge-parts", str(parts)]) == 0
    assert tree_bytes(parts) == tree_bytes(nci)


def test_merge_refuses_unfinished_parts(tmp_path, capsys):
    out = tmp_path / "half"
    assert shard("nci-tpsa", "--out", str(out), "--shard-size", "700", "--part", "0", "--num-parts", "3") == 0
    assert main(["merge-parts", str(out)]) == 2
    assert "is not finished" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()


def test_killed_then_rerun_equals_uninterrupted(nci, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "gtscale.cli", "shard", "nci-tpsa", "--out", str(out), "--shard-size", "700", "--max-nodes", "40", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(list((out / "parts").glob("*.json"))) < 2 and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list((out / "parts").glob("*.json")))
    assert 2 <= finished < 8, "the kill must land mid-run"
    assert not (out / "manifest.json").exists()
    # A leftover half-written shard must not count as finished, and a corrupted finished one is redone.
    first = sorted((out / "parts").glob("*.json"))[0]
    shard_path = out / json.loads(first.read_text())["path"]
    kept_mtime = {p: p.stat().st_mtime_ns for p in (out / "parts").glob("*.json") if p != first}
    shard_path.write_bytes(shard_path.read_bytes()[:1000])
    assert shard(*cmd[4:-1]) == 0
    assert tree_bytes(out) == tree_bytes(nci)
    assert not list(out.rglob("*.tmp"))
    assert all(p.stat().st_mtime_ns == t for p, t in kept_mtime.items()), "verified shards are kept, not redone"


def test_pcqm4mv2_layout(tmp_path):
    root = write_pcqm4mv2(tmp_path / "raw", count=120, extra_smiles=["C1CC", "", "[Na+].[Cl-]", "C"])
    out = tmp_path / "out"
    assert shard("pcqm4mv2", "--root", str(root), "--out", str(out), "--shard-size", "25", "--workers", "2") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["splits"]) == {"train", "valid", "test-dev", "test-challenge"}
    assert sum(sum(i["rejected"].values()) for i in manifest["splits"].values()) == 2
    records = read_all(out)
    assert all(np.isnan(r["y"]).all() for r in records["test-dev"].values())
    assert all(np.isfinite(r["y"]).all() for r in records["train"].values())
    data = __import__("pandas").read_csv(root / "pcqm4m-v2" / "raw" / "data.csv.gz", keep_default_na=False)
    for split in ("train", "valid"):
        for rec in list(records[split].values())[:10]:
            row = data.iloc[rec["meta"]["idx"]]
            assert np.array_equal(rec["node_feat"], featurize_smiles(row["smiles"])["node_feat"])
            assert rec["y"][0] == np.float32(row["homolumogap"])


@pytest.mark.parametrize("name,tasks,missing", [("ogbg-molhiv", 1, 0.0), ("ogbg-molpcba", 128, 0.3)])
def test_ogbg_layouts(tmp_path, name, tasks, missing):
    root = write_ogbg_mol(tmp_path / "raw", name, count=90, num_tasks=tasks, missing_fraction=missing)
    out = tmp_path / "out"
    assert shard(name, "--root", str(root), "--out", str(out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == {"type": "graph_classification", "num_targets": tasks, "target_names": manifest["task"]["target_names"]}
    assert [manifest["splits"][s]["rows"] for s in ("train", "valid", "test")] == [72, 9, 9]
    records = read_all(out)
    ys = np.stack([r["y"] for split in records.values() for r in split.values()])
    assert ys.shape[1] == tasks
    assert (np.isnan(ys).mean() > 0.2) == (missing > 0)


def test_smiles_table_with_split_column(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("id,smiles,logp,fold\n7,CCO,0.1,train\n9,c1ccccc1,1.5,train\n11,CC(=O)O,0.2,valid\n13,xx,0.0,test\n")
    out = tmp_path / "out"
    assert shard("smiles-csv", "--input", str(path), "--id-column", "id", "--target-columns", "logp", "--split-column", "fold", "--out", str(out)) == 0
    records = read_all(out)
    assert sorted(records["train"]) == ["0000000007", "0000000009"] and records["valid"]["0000000011"]["y"][0] == np.float32(0.2)
    assert json.loads((out / "manifest.json").read_text())["splits"]["test"]["rejected"] == {"invalid_smiles": 1}


def test_a_rerun_with_another_target_column_rewrites_the_records(tmp_path):
    """The same file sharded again into the same folder with another target column: the records
    hold the new column's values (they once kept the old ones: the shards were complete under a
    fingerprint of the sources alone)."""
    path = tmp_path / "mols.csv"
    path.write_text("smiles,a,b,fold\nCCO,1,10,train\nc1ccccc1,2,20,train\nCC(=O)O,3,30,valid\nCCN,4,40,test\n")
    out = tmp_path / "out"
    for column, scale in (("a", 1.0), ("b", 10.0)):
        assert shard("smiles-csv", "--input", str(path), "--target-columns", column, "--split-column", "fold", "--out", str(out),
                     "--svd-rank", "0", "--lap-k", "0") == 0
        assert sorted(float(r["y"][0]) for split in read_all(out).values() for r in split.values()) == [scale * k for k in (1, 2, 3, 4)]


@pytest.mark.slow  # RDKit's PAINS catalog over every bundled WEHI molecule
def test_wehi_pains_labels_come_from_the_filter_catalog(tmp_path, monkeypatch):
    """On the first 1,000 lines of RDKit's WEHI file (its layout exactly; all 10,000 cost ~35 CPU-s of
    PAINS matching), labelled in four chunks by two forked workers: in order, and from the catalog."""
    from rdkit import Chem
    from rdkit.Chem.FilterCatalog import FilterCatalog, FilterCatalogParams

    from gtscale.prep.sources import bundled

    sample = tmp_path / "wehi_mols.csv"
    with open(bundled.WEHI) as f:
        sample.write_text("".join(line for _, line in zip(range(1000), f)))
    monkeypatch.setattr(bundled, "WEHI", sample)
    monkeypatch.setattr(bundled.os, "sched_getaffinity", lambda pid: {0, 1})  # two workers on any machine
    table = bundled.read_wehi_pains()
    labels = table.targets[:, 0]
    assert len(labels) == 1000 and 0.01 < np.nanmean(labels) < 0.5  # some, not all, match PAINS
    np.testing.assert_array_equal(labels[750:], bundled.pains_labels(table.smiles[750:], workers=1))  # the last chunk, in place

    params = FilterCatalogParams()
    params.AddCatalog(FilterCatalogParams.FilterCatalogs.PAINS_A)
    catalog_a = FilterCatalog(params)
    hits_a = [i for i in range(300) if catalog_a.HasMatch(Chem.MolFromSmiles(table.smiles[i]))]
    assert hits_a and all(labels[i] == 1.0 for i in hits_a)  # family A matches are PAINS matches


def test_text_ids_travel_as_names(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("CCO ZINC000001\nc1ccccc1 ZINC000002\nCC(=O)O ZINC000003\n")
    out = tmp_path / "out"
    assert shard("smiles-csv", "--input", str(path), "--id-column", "1", "--split-column", "1", "--out", str(out)) == 0
    records = read_all(out)
    assert {r["meta"]["name"] for split in records.values() for r in split.values()} == {"ZINC000001", "ZINC000002", "ZINC000003"}
    assert records["ZINC000002"]["0000000001"]["meta"]["idx"] == 1  # row numbers as idx


def test_parts_with_differently_spelled_roots_merge(tmp_path):
    root = write_ogbg_mol(tmp_path / "raw", "ogbg-molhiv", count=40)
    out = tmp_path / "out"
    assert shard("ogbg-molhiv", "--root", str(root), "--out", str(out), "--shard-size", "10", "--part", "0", "--num-parts", "2") == 0
    assert shard("ogbg-molhiv", "--root", str(root) + "/./", "--out", str(out), "--shard-size", "10", "--part", "1", "--num-parts", "2") == 0
    assert main(["merge-parts", str(out)]) == 0


def test_pains_labels_are_the_same_across_worker_processes():
    import csv

    from gtscale.prep.sources.bundled import WEHI, pains_labels

    with open(WEHI) as f:
        smiles = [row[0] for _, row in zip(range(1200), csv.reader(f))] + ["not a smiles"]
    one, two = pains_labels(smiles, workers=1), pains_labels(smiles, workers=2)
    assert np.array_equal(one, two, equal_nan=True) and np.isnan(two[-1]) and 0 < np.nansum(two) < len(smiles) - 1
