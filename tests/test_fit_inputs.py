"""What `gtscale fit` makes of its input before any work: molecules repeated across the splits are
counted and warned of (or merged into one row each), a test split of train's molecules is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gtscale.errors import UserError
from gtscale.fit import fit
from gtscale.fit.duplicates import aggregate, molecule_keys
from gtscale.prep.sources.base import MoleculeTable
from gtscale.prep.sources.bundled import read_nci_tpsa

ROWS = 150


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    table = read_nci_tpsa()
    return pd.DataFrame({"smiles": table.smiles[:ROWS], "y": table.targets[:ROWS, 0]})


def three_files(frame: pd.DataFrame, folder: Path, test: pd.DataFrame) -> list[Path]:
    paths = [folder / f"{name}.csv" for name in ("train", "valid", "test")]
    for path, part in zip(paths, (frame.iloc[:100], frame.iloc[100:125], test)):
        part.to_csv(path, index=False)
    return paths


def test_test_molecules_also_in_train_are_counted_and_warned_of(frame, tmp_path, capsys):
    test = pd.concat([frame.iloc[125:137], frame.iloc[:48]])  # 48 of 60 test molecules are train's
    report = fit(three_files(frame, tmp_path, test), tmp_path / "x", recipe="ecfp", progress=False)
    assert report["duplicates"]["test_in_train"] == 48 and report["duplicates"]["rows"]["test"] == 60
    warning = "48 of 60 test molecules are also in train: the test metrics partly measure molecules the models trained on"
    assert warning in capsys.readouterr().err and warning in (tmp_path / "x" / "report.md").read_text()


def test_the_train_file_as_the_test_file_is_refused(frame, tmp_path):
    paths = three_files(frame, tmp_path, frame.iloc[125:])
    with pytest.raises(UserError, match="every one of the 100 test molecules is also in the train split"):
        fit([paths[0], paths[1], paths[0]], tmp_path / "x", recipe="ecfp", progress=False)


def test_aggregate_gives_each_molecule_one_row_with_its_mean_in_the_first_split_holding_it():
    smiles = ["CCO", "c1ccccc1", "OCC", "CCN", "C(C)O"]  # CCO three times, written three ways
    table = MoleculeTable(name="t", smiles=smiles, idx=np.arange(5), targets=np.array([[1.0], [5.0], [3.0], [7.0], [8.0]], np.float32),
                          target_names=["y"], task_type="graph_regression",
                          splits={"train": np.array([1, 2]), "valid": np.array([3]), "test": np.array([0, 4])})
    merged, keys, rows_merged = aggregate(table, molecule_keys(smiles), "regression")
    assert rows_merged == 2 and len(merged.smiles) == 3 and keys.count("CCO") == 1
    row = merged.smiles.index("OCC")  # train holds it, so train keeps it
    assert merged.targets[row, 0] == pytest.approx(4.0) and row in merged.splits["train"] and not len(merged.splits["test"])
    labels = MoleculeTable(name="t", smiles=smiles[:3], idx=np.arange(3), targets=np.array([[1.0], [0.0], [0.0]], np.float32), target_names=["y"],
                           task_type="graph_regression", splits={"train": np.array([0, 1, 2]), "valid": np.array([], np.int64), "test": np.array([], np.int64)})
    merged, _, _ = aggregate(labels, molecule_keys(smiles[:3]), "classification")
    assert np.isnan(merged.targets[merged.smiles.index("CCO"), 0])  # labels 1 and 0: a tie leaves the cell blank


def test_a_fit_with_duplicates_aggregated_tests_on_new_molecules_only(frame, tmp_path):
    doubled = pd.concat([frame, frame.iloc[:60].assign(y=frame.y.iloc[:60] + 2.0)], ignore_index=True)
    doubled.to_csv(tmp_path / "doubled.csv", index=False)
    warned = fit([tmp_path / "doubled.csv"], tmp_path / "warned", recipe="ecfp", progress=False)
    assert warned["duplicates"]["test_in_train"] > 0 and sum(warned["molecules"].values()) == ROWS + 60
    merged = fit([tmp_path / "doubled.csv"], tmp_path / "merged", recipe="ecfp", duplicates="aggregate", progress=False)
    counts = merged["duplicates"]
    assert counts["rows_merged"] == 60 and counts["test_in_train"] == counts["test_in_valid"] == counts["valid_in_train"] == 0
    assert sum(merged["molecules"].values()) == ROWS and json.loads((tmp_path / "merged" / "report.json").read_text())["duplicates"] == counts
    assert "60 rows of molecules given more than once were merged" in (tmp_path / "merged" / "report.md").read_text()


def test_an_infinite_target_is_refused_naming_its_row(frame, tmp_path):
    frame.assign(y=frame.y.where(frame.index != 3, np.inf)).to_csv(tmp_path / "inf.csv", index=False)
    with pytest.raises(UserError, match=r"inf.csv: data row 4: target column 'y' holds inf \(1 such cell\(s\)\); a target is a finite number"):
        fit([tmp_path / "inf.csv"], tmp_path / "x", recipe="ecfp", progress=False)


def test_the_report_says_what_was_left_out_of_each_split_and_each_members_hyperparameters(frame, tmp_path):
    unreadable = pd.DataFrame({"smiles": ["C1CC", "not a molecule", "C" * 700], "y": [1.0, 2.0, np.nan]})
    pd.concat([frame.assign(y=frame.y.where(frame.index != 5)), unreadable], ignore_index=True).to_csv(tmp_path / "mols.csv", index=False)
    report = fit([tmp_path / "mols.csv"], tmp_path / "x", recipe="ecfp", progress=False)
    text = (tmp_path / "x" / "report.md").read_text()
    left_out = {split: sum(reasons.values()) for split, reasons in report["left_out"].items()}
    assert sum(left_out.values()) == 3 and "Left out, as no member reads them: " in text
    assert all(f"{n} {split} (" in text for split, n in left_out.items() if n)
    assert "SMILES RDKit cannot read" in text and "more atoms than the cap" in text
    missing = report["targets"]["y"]["missing"]
    assert sum(missing.values()) == 1 and "Rows without a value of y (left out of its fit and test): " in text
    assert f"ECFP4 + SVR (baseline): C {report['targets']['y']['members']['ecfp']['C']:.4g}" in text


def test_a_kernel_member_of_weight_0_is_named_the_baseline():
    from gtscale.fit.report import chosen_words

    assert "this member is the ECFP4 baseline's model" in chosen_words("kernel", {"C": 10.0, "similarity": "tanimoto", "weight": 0.0, "gamma": 0.1})
    assert "baseline" not in chosen_words("kernel", {"C": 10.0, "similarity": "tanimoto", "weight": 0.5, "gamma": 0.1})


def test_options_that_would_be_ignored_or_misread_are_one_line(frame, tmp_path):
    frame.to_csv(tmp_path / "mols.csv", index=False)
    with pytest.raises(UserError, match=r"--split column:: name the column after column:"):
        fit([tmp_path / "mols.csv"], tmp_path / "x", split="column:", recipe="ecfp", progress=False)
    with pytest.raises(UserError, match=r"--seeds: recipe ecfp does not use it \(only the recipes finetune, large and all do\)"):
        fit([tmp_path / "mols.csv"], tmp_path / "x", seeds=(0, 1), recipe="ecfp", progress=False)
    with pytest.raises(UserError, match=r"--seeds: the members recipe auto plans for this set \(ecfp \+ kernel\) do not use it"):
        fit([tmp_path / "mols.csv"], tmp_path / "x", seeds=(0, 1), progress=False)  # a small set: the exact members, no network
    with pytest.raises(UserError, match=r"--init-from: recipe ecfp does not use it"):
        fit([tmp_path / "mols.csv"], tmp_path / "x", init_from="moses-egt", recipe="ecfp", progress=False)
    acyclic = pd.DataFrame({"smiles": [f"{'C' * k}O" for k in range(1, 31)] + [f"{'C' * k}N" for k in range(1, 31)], "y": np.arange(60.0)})
    acyclic.to_csv(tmp_path / "acyclic.csv", index=False)
    with pytest.raises(UserError, match=r"--split scaffold leaves no train, valid rows: the 60 molecules have 1 scaffold\(s\), the largest "
                                        r"\(none \(acyclic\)\) shared by 60; a scaffold split keeps each scaffold in one split"):
        fit([tmp_path / "acyclic.csv"], tmp_path / "x", split="scaffold", recipe="ecfp", progress=False)
    assert not (tmp_path / "x").exists()


def test_a_fit_folder_named_to_predict_or_fingerprint_points_at_its_export_and_measured_values_are_written_as_read(frame, tmp_path, capsys):
    from gtscale.cli import main

    frame.assign(y=(frame.y.astype(float) / 10).round(2)).to_csv(tmp_path / "mols.csv", index=False)
    fit([tmp_path / "mols.csv"], tmp_path / "x", recipe="ecfp", progress=False)
    written = pd.read_csv(tmp_path / "mols.csv", dtype=str).set_index("smiles")["y"]
    measured = pd.read_csv(tmp_path / "x" / "test-predictions.csv", dtype=str)
    assert (measured["y_measured"] == written[measured["smiles"]].to_numpy()).all()  # 5.51 as read, not 5.510000228881836
    capsys.readouterr()
    for command in ("predict", "fingerprint"):
        argv = [command, str(tmp_path / "x"), "--input", str(tmp_path / "mols.csv"), "--out", str(tmp_path / "out.csv"), "--no-progress"]
        assert main(argv) == 2
        assert f"x: a `gtscale fit` folder, not an export; its model is {tmp_path / 'x' / 'export'}" in capsys.readouterr().err
