"""`gtscale fit`: a CSV to a tested ensemble export in one call, chosen without the test split, whose
predictions are predict's own; scaffold splits keep scaffolds apart; the output folder's rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gtscale.errors import UserError
from gtscale.fit import choose, fit, read_fit_table
from gtscale.prep.sources.base import scaffold_split
from gtscale.prep.sources.bundled import read_nci_tpsa

ROWS = 150


@pytest.fixture(scope="module")
def molecules_csv(tmp_path_factory) -> Path:
    """150 NCI molecules with their TPSA as `y`, and two rows the members cannot read."""
    table = read_nci_tpsa()
    frame = pd.DataFrame({"smiles": table.smiles[:ROWS], "y": table.targets[:ROWS, 0]})
    frame = pd.concat([frame, pd.DataFrame({"smiles": ["C1CC", "not a molecule"], "y": [1.0, 2.0]})], ignore_index=True)
    path = tmp_path_factory.mktemp("fit") / "mols.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def fitted(molecules_csv, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fit-out") / "run"
    return out, fit([molecules_csv], out, target_column="y", progress=False)


def test_fit_writes_a_tested_export_that_predict_reads_the_same(fitted, tmp_path):
    from gtscale.cli import main

    out, report = fitted
    assert set(report["test"]) == {"ecfp", "kernel", "chosen"} and report["baseline"] == "ecfp"
    assert sum(report["molecules"].values()) == ROWS and sum(sum(c.values()) for c in report["left_out"].values()) == 2
    assert json.loads((out / "report.json").read_text())["test"] == report["test"]
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "| chosen model" in (out / "report.md").read_text()
    chosen = report["selection"]["chosen"]
    assert report["selection"]["candidates"][chosen] == min(report["selection"]["candidates"].values())
    saved = pd.read_csv(out / "test-predictions.csv")
    inputs = tmp_path / "test.csv"
    saved[["smiles"]].to_csv(inputs, index=False)
    assert main(["predict", str(out / "export"), "--input", str(inputs), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    column = "y_pred" if "y_pred" in predicted else "y_mean"
    np.testing.assert_allclose(predicted[column], saved["chosen_pred"], rtol=1e-5, atol=1e-4)
    rmse = float(np.sqrt(np.mean((saved["chosen_pred"] - saved["measured"]) ** 2)))
    assert rmse == pytest.approx(report["test"]["chosen"]["rmse"], rel=1e-6)


def test_the_choice_never_reads_the_test_split(molecules_csv, tmp_path):
    """Shuffling the test targets changes the test metrics, never the choice or its scores."""
    frame = pd.read_csv(molecules_csv)
    table = read_fit_table([molecules_csv], "smiles", "y", "random", 0)
    test_rows = table.splits["test"]
    frame.loc[test_rows, "y"] = np.random.default_rng(1).permutation(frame.loc[test_rows, "y"].to_numpy())
    shuffled = tmp_path / "shuffled.csv"
    frame.to_csv(shuffled, index=False)
    first = fit([molecules_csv], tmp_path / "a", recipe="ecfp", progress=False)
    second = fit([shuffled], tmp_path / "b", recipe="ecfp", progress=False)
    assert first["selection"] == second["selection"]
    assert first["test"]["ecfp"]["rmse"] != second["test"]["ecfp"]["rmse"]


def test_choose_takes_the_lowest_out_of_fold_rmse_and_offers_the_mean():
    y = np.array([0.0, 1.0, 2.0, 3.0])
    chosen, scores = choose({"a": y + 1.0, "b": y - 1.0}, y)
    assert chosen == "mean" and scores["mean"] == 0.0 and scores["a"] == scores["b"] == 1.0
    assert choose({"a": y + 0.1, "b": y + 1.0}, y)[0] == "a"


def test_three_files_are_train_valid_and_test(molecules_csv, tmp_path):
    frame = pd.read_csv(molecules_csv).iloc[:ROWS]
    paths = [tmp_path / f"{name}.csv" for name in ("train", "valid", "test")]
    for path, part in zip(paths, (frame.iloc[:100], frame.iloc[100:125], frame.iloc[125:])):
        part.to_csv(path, index=False)
    table = read_fit_table(paths, "smiles", "y", "random", 0)
    assert {k: len(v) for k, v in table.splits.items()} == {"train": 100, "valid": 25, "test": 25}
    assert table.smiles[100] == frame.smiles.iloc[100]
    with pytest.raises(UserError, match="give one CSV .* or three"):
        read_fit_table(paths[:2], "smiles", "y", "random", 0)


def test_a_scaffold_split_keeps_each_scaffold_in_one_split():
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    smiles = read_nci_tpsa().smiles[:400]
    splits = scaffold_split(smiles, seed=0)
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(400))
    where = {}
    for name, rows in splits.items():
        for row in rows:
            scaffold = MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(smiles[row]), includeChirality=False)
            assert where.setdefault(scaffold, name) == name, f"scaffold {scaffold!r} in {where[scaffold]} and {name}"
    assert len(splits["train"]) >= 0.75 * 400 and len(splits["valid"]) and len(splits["test"])


def test_split_options_and_bad_columns_are_one_line(molecules_csv, tmp_path):
    with pytest.raises(UserError, match="--split: 'stratified' is not one of"):
        read_fit_table([molecules_csv], "smiles", "y", "stratified", 0)
    with pytest.raises(UserError, match="column"):
        read_fit_table([molecules_csv], "smiles", "pIC50", "random", 0)
    frame = pd.read_csv(molecules_csv)
    frame["fold"] = ["train"] * 100 + ["valid"] * 52
    frame.to_csv(tmp_path / "two.csv", index=False)
    with pytest.raises(UserError, match="fit needs train, valid and test"):
        read_fit_table([tmp_path / "two.csv"], "smiles", "y", "column:fold", 0)


def test_a_folder_fit_did_not_write_is_refused(molecules_csv, tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UserError, match="holds files gtscale did not write"):
        fit([molecules_csv], tmp_path, recipe="ecfp", progress=False)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.slow
def test_the_finetune_recipe_adds_fine_tuned_seeds_chosen_on_the_valid_split(molecules_csv, tmp_path):
    """Two fine-tuned seeds (a few steps) join ECFP + SVR; the choice is made on the valid split,
    and the export predicts the test molecules as the report says."""
    from gtscale.members import load_members

    steps = ["schedule.total_steps=6", "schedule.warmup_steps=1", "eval.every=3", "eval.patience=0", "checkpoint.every=3",
             "data.loader.batch_size=16", "logging.progress=false"]
    report = fit([molecules_csv], tmp_path / "ft", recipe="finetune", seeds=(0, 1), finetune_overrides=steps, progress=False)
    assert set(report["test"]) == {"ecfp", "finetune", "chosen"}
    assert report["selection"]["rule"] == "lowest RMSE on the valid split"
    assert report["selection"]["rows"] == report["molecules"]["valid"]
    assert report["members"]["finetune"]["seeds"] == [0, 1]
    members, weights = load_members(tmp_path / "ft" / "members" / "finetune")
    assert len(members) == 2 and weights == pytest.approx([0.5, 0.5])
    chosen, _ = load_members(tmp_path / "ft" / "export")
    assert len(chosen) == {"ecfp": 1, "finetune": 2, "mean": 3}[report["selection"]["chosen"]]
