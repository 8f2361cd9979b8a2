"""`gtscale shard --graph-features`: Morgan bits and RDKit 2D descriptors per molecule, the
descriptors standardised with the train split's statistics recorded in the manifest."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from gtscale.cli import main
from gtscale.format.manifest import load_manifest
from gtscale.format.tario import iter_shard
from gtscale.prep.graph_features import GENERATORS
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.sources.descriptors import compute_descriptors, descriptor_names


@pytest.fixture(scope="module")
def featured(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    root = tmp_path_factory.mktemp("graphfeat")
    table = read_nci_tpsa()
    frame = pd.DataFrame({"smiles": table.smiles[:60], "tpsa": table.targets[:60, 0], "split": ["train"] * 40 + ["test"] * 20})
    frame.to_csv(root / "m.csv", index=False)
    out = root / "shards"
    assert main(["shard", "smiles-csv", "--input", str(root / "m.csv"), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(out), "--no-progress", "--lap-k", "0", "--graph-features", "morgan2048,rdkit2d"]) == 0
    return out, frame


def _records(out: Path) -> dict[int, dict]:
    return {r["meta"]["idx"]: r for p in sorted(out.glob("*/*.tar")) for _, r in iter_shard(p)}


def test_records_hold_morgan_bits_then_descriptors_standardised_with_train_statistics(featured):
    out, frame = featured
    manifest = load_manifest(out)
    graph = manifest["features"]["graph"]
    n_desc = len(descriptor_names())
    assert graph["generators"] == ["morgan2048", "rdkit2d"] and graph["dim"] == 2048 + n_desc == GENERATORS["morgan2048"] + GENERATORS["rdkit2d"]
    train = compute_descriptors(frame["smiles"][:40].tolist(), progress=False)
    np.testing.assert_allclose(graph["rdkit2d"]["mean"], np.nanmean(train, axis=0), rtol=1e-9, atol=1e-12)
    std = np.nanstd(train, axis=0)
    np.testing.assert_allclose(graph["rdkit2d"]["std"], np.where(std > 1e-12, std, 1.0), rtol=1e-9)
    records = _records(out)
    morgan = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    mol_wt = descriptor_names().index("MolWt")
    z_train = []
    for idx, record in records.items():
        feat = record["graph_feat"]
        assert feat.dtype == np.float16 and feat.shape == (graph["dim"],)
        bits = np.zeros(2048)
        DataStructs.ConvertToNumpyArray(morgan.GetFingerprint(Chem.MolFromSmiles(frame["smiles"][idx])), bits)
        np.testing.assert_array_equal(feat[:2048], bits)
        raw = compute_descriptors([frame["smiles"][idx]], progress=False)[0]
        expected = (raw[mol_wt] - graph["rdkit2d"]["mean"][mol_wt]) / graph["rdkit2d"]["std"][mol_wt]
        assert feat[2048 + mol_wt] == pytest.approx(expected, abs=5e-3)
        assert np.abs(feat[2048:]).max() <= 6.0
        if idx < 40:
            z_train.append(feat[2048 + mol_wt])
    assert abs(np.mean(z_train)) < 0.01 and np.std(z_train) == pytest.approx(1.0, abs=0.01)  # standardised on train


def test_an_unknown_generator_is_refused_before_anything_is_written(tmp_path, capsys):
    assert main(["shard", "nci-tpsa", "--out", str(tmp_path / "s"), "--graph-features", "morgan2048,ecfp6"]) == 2
    assert "--graph-features: 'ecfp6' is not a list of distinct generators" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_recorded_width_that_is_not_the_generators_is_refused():
    """A head built for 16 graph features beside generators that make 2,048 once failed in its
    forward (a traceback in `gtscale predict`); the record is refused as it is read."""
    from gtscale.errors import UserError
    from gtscale.prep.graph_features import GraphFeatures

    assert GraphFeatures.from_manifest({"generators": ["morgan2048"], "dim": 2048}, "e/export.json").dim == 2048
    with pytest.raises(UserError, match=r"e/export.json: features.graph.dim 16 is not the width of generators morgan2048 \(2048\)"):
        GraphFeatures.from_manifest({"generators": ["morgan2048"], "dim": 16}, "e/export.json")


def test_count_morgan_holds_log_counts_of_the_same_environments_the_bits_mark(tmp_path):
    """morgan2048counts: log(1 + count) of each hashed radius-2 environment, nonzero exactly where
    morgan2048 sets a bit; an octyl chain repeats CH2 environments that bits count once."""
    table = read_nci_tpsa()
    smiles = ["CCCCCCCCc1ccccc1", *table.smiles[:9]]
    frame = pd.DataFrame({"smiles": smiles, "y": np.arange(10.0), "split": ["train"] * 7 + ["test"] * 3})
    frame.to_csv(tmp_path / "m.csv", index=False)
    out = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(tmp_path / "m.csv"), "--target-columns", "y", "--split-column", "split",
                 "--out", str(out), "--no-progress", "--lap-k", "0", "--graph-features", "morgan2048counts,morgan2048"]) == 0
    graph = load_manifest(out)["features"]["graph"]
    assert graph["generators"] == ["morgan2048counts", "morgan2048"] and graph["dim"] == 4096
    morgan = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    for idx, record in _records(out).items():
        counts, bits = record["graph_feat"][:2048].astype(np.float64), record["graph_feat"][2048:]
        expected = np.log1p(morgan.GetCountFingerprintAsNumPy(Chem.MolFromSmiles(smiles[idx])).astype(np.float64))
        np.testing.assert_allclose(counts, expected, rtol=1e-3)
        np.testing.assert_array_equal(counts > 0, bits > 0)
        if idx == 0:
            assert counts.max() == pytest.approx(np.log1p(7), rel=1e-3)  # the octyl chain's 7 CH2: one radius-0 environment, one bit
