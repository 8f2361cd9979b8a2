"""--targets rdkit-descriptors: RDKit's descriptor set as standardised multi-task targets, named and
versioned in the manifest; the offline-union source they are meant for."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import rdkit
from rdkit import Chem
from rdkit.Chem import Descriptors

from gtscale.cli import main
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.sources.descriptors import CLIP, SET_NAME, standardise, with_descriptor_targets


def test_standardise_uses_train_statistics_drops_constants_and_clips():
    values = np.array([[1.0, 7.0, 1.0], [3.0, 7.0, np.nan], [5.0, 7.0, 1e6], [101.0, 7.0, 2.0]])
    z, keep = standardise(values, train_rows=np.array([0, 1]))
    assert keep.tolist() == [True, False, False]  # column 1 constant, column 2 one train label
    # train mean 2, std 1: 1 → -1, 3 → 1, 5 → 3, 101 → 99 clipped to CLIP
    assert z[:, 0].tolist() == [-1.0, 1.0, 3.0, CLIP]


def test_table_targets_are_the_descriptors_standardised_on_train():
    table = read_nci_tpsa()
    small = type(table)(name="nci", smiles=table.smiles[:60], idx=table.idx[:60], targets=table.targets[:60],
                        target_names=["tpsa"], task_type="graph_regression",
                        splits={"train": np.arange(40), "valid": np.arange(40, 60)})
    out = with_descriptor_targets(small, progress=False)
    assert out.name == f"nci+rdkit-descriptors-{rdkit.__version__}" and SET_NAME.endswith(rdkit.__version__)
    assert "MolWt" in out.target_names and "TPSA" in out.target_names and len(out.target_names) > 150
    weights = np.array([Descriptors.MolWt(Chem.MolFromSmiles(s)) for s in small.smiles])
    expected = (weights - weights[:40].mean()) / weights[:40].std()
    np.testing.assert_allclose(out.targets[:, out.target_names.index("MolWt")], np.clip(expected, -CLIP, CLIP), rtol=1e-5, atol=1e-5)
    train = out.targets[:40]
    np.testing.assert_allclose(np.nanmean(train, axis=0), 0.0, atol=0.05)


def test_shard_with_descriptor_targets_names_the_set_in_the_manifest(tmp_path):
    table = read_nci_tpsa()
    pd.DataFrame({"smiles": table.smiles[:50], "tpsa": table.targets[:50, 0]}).to_csv(tmp_path / "mols.csv", index=False)
    out = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(tmp_path / "mols.csv"), "--target-columns", "tpsa",
                 "--targets", "rdkit-descriptors", "--out", str(out), "--no-progress", "--lap-k", "0"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dataset"] == f"mols.csv+{SET_NAME}"
    assert manifest["task"]["num_targets"] > 150 and "MolWt" in manifest["task"]["target_names"]


def test_offline_union_needs_descriptor_targets(tmp_path, capsys):
    assert main(["shard", "offline-union", "--out", str(tmp_path / "u")]) == 2
    assert "--targets rdkit-descriptors" in capsys.readouterr().err


def test_offline_union_holds_train_molecules_once_and_no_test_molecule(tmp_path):
    import shutil

    from gtscale.prep.sources.bundled import NCI_SMILES
    from gtscale.prep.sources.moleculeace import data_folder
    from gtscale.prep.sources.union import canonical, read_offline_union

    for name in ("CHEMBL2835_Ki", "CHEMBL4203_Ki"):  # two small sets, as --root
        shutil.copy(data_folder() / f"{name}.csv", tmp_path / f"{name}.csv")
    table = read_offline_union(tmp_path)
    train, test = set(), set()
    for name in ("CHEMBL2835_Ki", "CHEMBL4203_Ki"):
        f = pd.read_csv(tmp_path / f"{name}.csv")
        train |= set(f.loc[f["split"] == "train", "smiles"].map(canonical))
        test |= set(f.loc[f["split"] == "test", "smiles"].map(canonical))
    nci = {canonical(line.split()[0]) for line in NCI_SMILES.read_text().splitlines()}
    assert sorted(table.smiles) == sorted(train | nci)
    assert not (test - train - nci) & set(table.smiles)
    assert sorted(np.concatenate(list(table.splits.values())).tolist()) == list(range(len(table.smiles)))
    assert {k: len(v) for k, v in table.splits.items()} == {"train": round(0.95 * len(table.smiles)), "valid": len(table.smiles) - round(0.95 * len(table.smiles))}
