"""`gtscale shard moses --targets rdkit-fast`: MOSES's splits from the molsets package's CSVs, with
the cheap descriptor targets standardised on its train split. A few hundred molecules of each
file, copied into a --root folder in MOSES's own layout."""

import gzip
import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest
import rdkit
from rdkit import Chem
from rdkit.Chem import Descriptors

from gtscale.cli import main
from gtscale.format.manifest import load_manifest
from gtscale.format.tario import iter_shard
from gtscale.prep.sources import moses
from gtscale.prep.sources.descriptors import FAST

COUNTS = {"train": 200, "test": 50, "test_scaffolds": 50}
pytestmark = pytest.mark.skipif(importlib.util.find_spec("moses") is None, reason="molsets not installed (launch/env.sh installs it)")


@pytest.fixture(scope="module")
def moses_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("moses")
    for split, count in COUNTS.items():
        with gzip.open(moses.data_folder() / f"{split}.csv.gz", "rt") as src, gzip.open(root / f"{split}.csv.gz", "wt") as dst:
            dst.writelines(itertools.islice(src, count + 1))  # header + count molecules
    return root


def test_the_package_ships_the_three_files_with_their_sizes():
    folder = moses.data_folder()
    for split in moses.SPLITS:
        assert (folder / f"{split}.csv.gz").stat().st_size > 1_000_000


def test_shard_moses_with_fast_descriptor_targets(moses_root, tmp_path):
    out = tmp_path / "shards"
    assert main(["shard", "moses", "--root", str(moses_root), "--targets", "rdkit-fast", "--out", str(out), "--no-progress",
                 "--lap-k", "0", "--shard-size", "100"]) == 0
    manifest = load_manifest(out)
    assert manifest["dataset"] == f"moses+rdkit-fast-{rdkit.__version__}"
    assert manifest["task"]["target_names"] == list(FAST)
    assert {s: info["samples"] for s, info in manifest["splits"].items()} == COUNTS  # MOSES molecules all parse
    records = {r["meta"]["idx"]: r for p in sorted(out.glob("*/*.tar")) for _, r in iter_shard(p)}
    assert sorted(records) == list(range(sum(COUNTS.values())))  # idx: rows of train, then test, then test_scaffolds
    with gzip.open(moses_root / "train.csv.gz", "rt") as f:
        train = [line.strip() for line in itertools.islice(f, 1, None)]
    weights = np.array([Descriptors.MolWt(Chem.MolFromSmiles(s)) for s in train])
    column = FAST.index("MolWt")
    z = np.array([records[i]["y"][column] for i in range(len(train))])
    np.testing.assert_allclose(z, (weights - weights.mean()) / weights.std(), rtol=1e-4, atol=1e-4)
    y = np.stack([r["y"] for r in records.values()])
    assert np.isfinite(y).all() and y.shape[1] == len(FAST)


def test_moses_needs_descriptor_targets(moses_root, tmp_path, capsys):
    assert main(["shard", "moses", "--root", str(moses_root), "--out", str(tmp_path / "s")]) == 2
    assert "moses has no targets of its own: add --targets rdkit-fast" in capsys.readouterr().err
