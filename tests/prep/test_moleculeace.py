"""The MoleculeACE source: every set the installed package bundles reads with its split counts,
validation carved from train (seeded), test as given, cliff_mol carried in meta."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.tario import iter_shard
from gtscale.prep.sources.moleculeace import available, cliff_flag, data_folder, read_moleculeace


def _csv_rows(name: str) -> list[dict]:
    with open(data_folder() / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_package_bundles_thirty_sets():
    names = available()
    assert len(names) == 30 and "CHEMBL214_Ki" in names and "CHEMBL2047_EC50" in names


@pytest.mark.parametrize("name", available())
def test_every_bundled_set_reads_with_its_split(name):
    rows = _csv_rows(name)
    table = read_moleculeace(name, seed=0)
    train_rows = [i for i, r in enumerate(rows) if r["split"] == "train"]
    test_rows = [i for i, r in enumerate(rows) if r["split"] == "test"]
    assert len(table.smiles) == len(rows) and table.smiles[5] == rows[5]["smiles"]
    assert table.splits["test"].tolist() == test_rows
    carved = np.concatenate([table.splits["train"], table.splits["valid"]])
    assert sorted(carved.tolist()) == train_rows
    assert len(table.splits["valid"]) == round(0.1 * len(train_rows))
    np.testing.assert_allclose(table.targets[:, 0], [float(r["y"]) for r in rows], rtol=1e-6)
    assert [cliff_flag(n) for n in table.names] == [r["cliff_mol"] == "1" for r in rows]


def test_known_counts_and_seeded_validation():
    table = read_moleculeace("CHEMBL214_Ki", seed=0)  # 3,317 molecules: 2,651 train, 666 test
    sizes = {k: len(v) for k, v in table.splits.items()}
    assert sizes == {"train": 2386, "valid": 265, "test": 666}
    again, other = read_moleculeace("CHEMBL214_Ki", seed=0), read_moleculeace("CHEMBL214_Ki", seed=1)
    assert np.array_equal(again.splits["valid"], table.splits["valid"])
    assert not np.array_equal(other.splits["valid"], table.splits["valid"])
    assert np.array_equal(other.splits["test"], table.splits["test"])


def test_unknown_or_missing_dataset_is_a_one_line_error():
    with pytest.raises(UserError, match="CHEMBL214_Ki"):
        read_moleculeace("CHEMBL1_Ki")
    with pytest.raises(UserError, match="--dataset"):
        read_moleculeace(None)


def test_shard_command_writes_the_splits_and_cliff_flags(tmp_path):
    out = tmp_path / "ace"
    assert main(["shard", "moleculeace", "--dataset", "CHEMBL2835_Ki", "--out", str(out), "--no-progress", "--lap-k", "0"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    rows = _csv_rows("CHEMBL2835_Ki")
    metas = {}
    for shard in out.rglob("*.tar"):
        for _, record in iter_shard(shard):
            metas[record[schema.META]["idx"]] = record[schema.META]
    assert len(metas) == len(rows) == 615
    assert all(cliff_flag(m["name"]) == (rows[i]["cliff_mol"] == "1") for i, m in metas.items())
    assert manifest["task"]["target_names"] == ["y"]
