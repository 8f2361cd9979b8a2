"""`gtscale fit`: a CSV to a tested ensemble export in one call, chosen without the test split, whose
predictions are predict's own; scaffold splits keep scaffolds apart; the output folder's rules. A
0/1 column gets calibrated classifiers (scikit-learn's Platt scaling, exported as tensors that run
nothing) chosen by ROC-AUC; several columns get one export with a column each, a blank cell
leaving its molecule out of that column alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.fit import choose, fit, fit_task, read_fit_table
from gtscale.models.export import MODEL_FILE, read_weights
from gtscale.prep.sources.base import scaffold_split
from gtscale.prep.sources.bundled import read_nci_tpsa
from export_fixtures import save_tensors

ROWS = 150
ROOT = Path(__file__).resolve().parents[1]


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
    return out, fit([molecules_csv], out, target_columns=("y",), progress=False)


def test_fit_writes_a_tested_export_that_predict_reads_the_same(fitted, tmp_path):
    out, report = fitted
    result = report["targets"]["y"]
    assert report["task"] == "regression" and set(result["test"]) == {"ecfp", "kernel", "chosen"} and report["baseline"] == "ecfp"
    assert sum(report["molecules"].values()) == ROWS and sum(sum(c.values()) for c in report["left_out"].values()) == 2
    assert json.loads((out / "report.json").read_text())["targets"]["y"]["test"] == result["test"]
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "| chosen model" in (out / "report.md").read_text()
    chosen = result["selection"]["chosen"]
    assert result["selection"]["candidates"][chosen] == min(result["selection"]["candidates"].values())
    saved = pd.read_csv(out / "test-predictions.csv")
    inputs = tmp_path / "test.csv"
    saved[["smiles"]].to_csv(inputs, index=False)
    assert main(["predict", str(out / "export"), "--input", str(inputs), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    column = "y_pred" if "y_pred" in predicted else "y_mean"
    np.testing.assert_allclose(predicted[column], saved["y_chosen_pred"], rtol=1e-5, atol=1e-4)
    rmse = float(np.sqrt(np.mean((saved["y_chosen_pred"] - saved["y_measured"]) ** 2)))
    assert rmse == pytest.approx(result["test"]["chosen"]["rmse"], rel=1e-6)


def test_the_choice_never_reads_the_test_split(molecules_csv, tmp_path):
    """Shuffling the test targets changes the test metrics, never the choice or its scores."""
    frame = pd.read_csv(molecules_csv)
    table = read_fit_table([molecules_csv], "smiles", ["y"], "random", 0)
    test_rows = table.splits["test"]
    frame.loc[test_rows, "y"] = np.random.default_rng(1).permutation(frame.loc[test_rows, "y"].to_numpy())
    shuffled = tmp_path / "shuffled.csv"
    frame.to_csv(shuffled, index=False)
    first = fit([molecules_csv], tmp_path / "a", recipe="ecfp", progress=False)
    second = fit([shuffled], tmp_path / "b", recipe="ecfp", progress=False)
    assert first["targets"]["y"]["selection"] == second["targets"]["y"]["selection"]
    assert first["targets"]["y"]["test"]["ecfp"]["rmse"] != second["targets"]["y"]["test"]["ecfp"]["rmse"]


def test_choose_takes_the_lowest_out_of_fold_rmse_and_offers_the_mean():
    y = np.array([0.0, 1.0, 2.0, 3.0])
    chosen, scores, _ = choose({"a": y + 1.0, "b": y - 1.0}, y)
    assert chosen == "mean" and scores["mean"] == 0.0 and scores["a"] == scores["b"] == 1.0
    assert choose({"a": y + 0.1, "b": y + 1.0}, y)[0] == "a"


def test_three_files_are_train_valid_and_test(molecules_csv, tmp_path):
    frame = pd.read_csv(molecules_csv).iloc[:ROWS]
    paths = [tmp_path / f"{name}.csv" for name in ("train", "valid", "test")]
    for path, part in zip(paths, (frame.iloc[:100], frame.iloc[100:125], frame.iloc[125:])):
        part.to_csv(path, index=False)
    table = read_fit_table(paths, "smiles", ["y"], "random", 0)
    assert {k: len(v) for k, v in table.splits.items()} == {"train": 100, "valid": 25, "test": 25}
    assert table.smiles[100] == frame.smiles.iloc[100]
    with pytest.raises(UserError, match="give one CSV .* or three"):
        read_fit_table(paths[:2], "smiles", ["y"], "random", 0)


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
        read_fit_table([molecules_csv], "smiles", ["y"], "stratified", 0)
    with pytest.raises(UserError, match="column"):
        read_fit_table([molecules_csv], "smiles", ["pIC50"], "random", 0)
    frame = pd.read_csv(molecules_csv)
    frame["fold"] = ["train"] * 100 + ["valid"] * 52
    frame.to_csv(tmp_path / "two.csv", index=False)
    with pytest.raises(UserError, match="fit needs train, valid and test"):
        read_fit_table([tmp_path / "two.csv"], "smiles", ["y"], "column:fold", 0)


def test_a_folder_fit_did_not_write_is_refused(molecules_csv, tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UserError, match="holds files gtscale did not write"):
        fit([molecules_csv], tmp_path, recipe="ecfp", progress=False)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.slow
def test_the_finetune_recipe_adds_fine_tuned_seeds_chosen_on_the_valid_split(molecules_csv, tmp_path):
    """Two fine-tuned seeds (a few steps) join ECFP + SVR; the choice is made on the valid split,
    and the export predicts the test molecules as the report says."""
    from gtscale.members.load import load_members

    steps = ["schedule.total_steps=6", "schedule.warmup_steps=1", "eval.every=3", "eval.patience=0", "checkpoint.every=3",
             "data.loader.batch_size=16"]
    report = fit([molecules_csv], tmp_path / "ft", recipe="finetune", seeds=(0, 1), finetune_overrides=steps, progress=False)
    for run in ("seed-0", "seed-0-refit", "seed-1", "seed-1-refit"):  # no progress: not the training runs' bars either
        assert yaml.safe_load((tmp_path / "ft" / "finetune" / run / "config.resolved.yaml").read_text())["logging"]["progress"] is False
    result = report["targets"]["y"]
    assert set(result["test"]) == {"ecfp", "finetune", "chosen"}
    assert result["selection"]["rule"] == "lowest RMSE on the valid split"
    assert result["selection"]["rows"] == report["molecules"]["valid"]
    assert result["members"]["finetune"]["seeds"] == [0, 1]
    # each seed chose its step on valid and was refitted on train + valid for that many steps: the
    # member ships the refits, and the choice read the validated runs' valid predictions
    sweep = json.loads((tmp_path / "ft" / "finetune" / "sweep.json").read_text())["rows"][0]
    assert result["members"]["finetune"]["steps"] == [run["refit_step"] for run in sweep["runs"]]
    assert all(Path(run["run_dir"]).name == f"seed-{run['seed']}-refit" for run in sweep["runs"])
    members, weights = load_members(tmp_path / "ft" / "members" / "finetune")
    assert len(members) == 2 and weights == pytest.approx([0.5, 0.5])
    refit_weights = [read_weights(Path(run["export"]) / MODEL_FILE) for run in sweep["runs"]]
    shipped = [read_weights(tmp_path / "ft" / "members" / "finetune" / f"finetune-seed-{seed}" / MODEL_FILE) for seed in (0, 1)]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(refit_weights, shipped) for k in a)
    chosen, _ = load_members(tmp_path / "ft" / "export")
    assert len(chosen) == {"ecfp": 1, "finetune": 2, "mean": 3}[result["selection"]["chosen"]]


# --- a 0/1 column: calibrated classifiers ----------------------------------------------------------
@pytest.fixture(scope="module")
def activity_csv(tmp_path_factory) -> Path:
    """Every fifth molecule of the tutorial's aryl sulfonamides (200), `active` = activity at or above
    its median (1) or below (0), `potent` = activity of 7 or more (about 1 in 3), each with blank cells
    (no label) in other rows."""
    frame = pd.read_csv(ROOT / "docs" / "tutorial" / "activity.csv").iloc[::5].reset_index(drop=True)
    frame["active"] = (frame["activity"] >= frame["activity"].median()).astype(float)
    frame["potent"] = (frame["activity"] >= 7.0).astype(float)
    frame.loc[frame.index % 9 == 4, "active"] = np.nan
    frame.loc[frame.index % 7 == 2, "potent"] = np.nan
    path = tmp_path_factory.mktemp("activity") / "activity.csv"
    frame[["smiles", "active", "potent"]].to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def classified(activity_csv, tmp_path_factory) -> tuple[Path, dict]:
    """`gtscale fit activity.csv --target-column active` with the default (kernel) recipe."""
    out = tmp_path_factory.mktemp("fit-active") / "run"
    assert main(["fit", str(activity_csv), "--target-column", "active", "--out", str(out), "--no-progress"]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_a_binary_column_gets_calibrated_classifiers_chosen_by_roc_auc(classified, tmp_path):
    from sklearn.metrics import roc_auc_score

    out, report = classified
    result = report["targets"]["active"]
    assert report["task"] == "classification" and set(result["test"]) == {"ecfp", "kernel", "chosen"}
    assert all(set(m) == {"rocauc", "prauc", "logloss"} for m in result["test"].values())
    assert result["selection"]["rule"].startswith("highest ROC-AUC") and result["members"]["ecfp"]["selection"].startswith("5-fold stratified")
    candidates = result["selection"]["candidates"]
    assert candidates[result["selection"]["chosen"]] == max(candidates.values()) and 0.5 < max(candidates.values()) <= 1.0
    assert (out / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (out / "parity.png").exists()
    text = (out / "report.md").read_text()
    assert "| ECFP4 + SVC (baseline) |" in text and "test ROC-AUC | test PR-AUC" in text
    for member, name in (("ecfp", "name: ecfp-svc"), ("kernel", "name: kernel-svc")):
        assert name in (out / "members" / member / "model.yaml").read_text()
        assert json.loads((out / "members" / member / "export.json").read_text())["task"]["loss"] == "bce"
    # predict reads the export and gives the probabilities the report scored
    saved = pd.read_csv(out / "test-predictions.csv")
    saved[["smiles"]].to_csv(tmp_path / "test.csv", index=False)
    assert main(["predict", str(out / "export"), "--input", str(tmp_path / "test.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    column = "active_pred" if "active_pred" in predicted else "active_mean"
    np.testing.assert_allclose(predicted[column], saved["active_chosen_pred"], rtol=1e-5, atol=1e-6)
    assert ((predicted[column] > 0) & (predicted[column] < 1)).all()
    labelled = saved["active_measured"].notna()
    assert roc_auc_score(saved["active_measured"][labelled], saved["active_chosen_pred"][labelled]) == pytest.approx(result["test"]["chosen"]["rocauc"])


def test_the_svc_member_predicts_scikit_learns_platt_scaled_probabilities(classified, activity_csv):
    """ECFP + SVC's export predicts what scikit-learn's CalibratedClassifierCV (sigmoid, one SVC on all
    of train + valid, the sigmoid on the out-of-fold decision values of the folds that chose C) does."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.svm import SVC

    from gtscale.members.fingerprints import ecfp, tanimoto

    out, report = classified
    frame = pd.read_csv(activity_csv)
    splits = read_fit_table([activity_csv], "smiles", ["active"], "random", 0).splits
    pooled = [row for split in ("train", "valid") for row in splits[split] if not np.isnan(frame["active"][row])]
    bits, labels = ecfp(frame["smiles"][pooled].tolist()), frame["active"][pooled].to_numpy()
    C = report["targets"]["active"]["members"]["ecfp"]["C"]
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    calibrated = CalibratedClassifierCV(SVC(kernel="precomputed", C=C), method="sigmoid", cv=folds, ensemble=False).fit(tanimoto(bits, bits), labels)
    saved = pd.read_csv(out / "test-predictions.csv")
    expected = calibrated.predict_proba(tanimoto(ecfp(saved["smiles"].tolist()), bits))[:, 1]
    np.testing.assert_allclose(saved["active_ecfp_pred"], expected, rtol=1e-5, atol=1e-6)


def test_a_crafted_or_mislabelled_classifier_export_runs_nothing_and_is_refused(classified, tmp_path, capsys, monkeypatch):
    from bad_files import plant_code

    out, _ = classified
    monkeypatch.chdir(tmp_path)
    pd.DataFrame({"smiles": ["CCO", "c1ccccc1O"]}).to_csv(tmp_path / "in.csv", index=False)

    def refusal(export: Path) -> str:
        capsys.readouterr()
        assert main(["predict", str(export), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and not (tmp_path / "p.csv").exists(), lines
        return lines[0]

    for member in ("ecfp", "kernel"):
        crafted = shutil.copytree(out / "members" / member, tmp_path / f"crafted-{member}")
        plant_code(crafted / "model.pt", tmp_path / "PWNED")
        assert "model.pt: refused: loading it would run code" in refusal(crafted)
        assert not (tmp_path / "PWNED").exists()

    mislabelled = shutil.copytree(out / "members" / "ecfp", tmp_path / "mislabelled")
    meta = json.loads((mislabelled / "export.json").read_text())
    (mislabelled / "export.json").write_text(json.dumps(meta | {"task": {"loss": "mse", "metric": "rmse", "evaluator": "regression"}}))
    assert "task.loss 'mse' does not fit model.yaml's 'ecfp-svc'" in refusal(mislabelled)  # its logits would pass for values

    import torch

    uncalibrated = shutil.copytree(out / "members" / "kernel", tmp_path / "uncalibrated")
    state = torch.load(uncalibrated / "model.pt", weights_only=True)
    del state["platt"]
    save_tensors(uncalibrated, state)
    assert "lacks tensor platt" in refusal(uncalibrated)

    escaping = shutil.copytree(out / "export", tmp_path / "escaping")
    (escaping / "targets.json").write_text(json.dumps({"format": "gtscale-targets", "targets": ["active"], "members": [".."], "shares": [[1]]}))
    assert "targets.json: not a record gtscale wrote" in refusal(escaping)


def test_choose_takes_the_highest_out_of_fold_roc_auc_for_a_classification_then_the_lowest_log_loss():
    y = np.array([0, 0, 1, 1])
    chosen, scores, losses = choose({"a": np.array([0.1, 0.6, 0.4, 0.9]), "b": np.array([0.3, 0.1, 0.9, 0.2])}, y, "classification")
    assert scores == {"a": 0.75, "b": 0.75, "mean": 1.0} and chosen == "mean" and set(losses) == {"a", "b", "mean"}
    assert choose({"a": np.array([0.1, 0.2, 0.8, 0.9]), "b": np.array([0.9, 0.8, 0.2, 0.1])}, y, "classification")[0] == "a"
    # one ranking, three calibrations: the same ROC-AUC, and the sharpest right one has the lowest log loss
    ranking = np.array([0.1, 0.2, 0.3, 0.4])
    chosen, scores, losses = choose({"flat": 0.45 + ranking / 10, "sharp": ranking * 2.4 - 0.2}, y, "classification")
    assert len(set(scores.values())) == 1 and chosen == "sharp" == min(losses, key=losses.get)


def test_the_task_comes_from_the_columns_or_is_named(activity_csv, tmp_path, capsys):
    frame = pd.read_csv(activity_csv)
    frame["activity"] = pd.read_csv(ROOT / "docs" / "tutorial" / "activity.csv")["activity"].iloc[::5].to_numpy()
    frame["label"] = np.where(frame["activity"] >= 7.0, "active", "inactive")
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, index=False)

    def table(*columns):
        return read_fit_table([path], "smiles", list(columns), "random", 0)

    assert fit_task(table("active", "potent"), "auto") == "classification"  # 0/1 with blank cells
    assert fit_task(table("activity"), "auto") == "regression"
    assert fit_task(table("active"), "regression") == "regression"
    with pytest.raises(UserError, match="--task classification, but target column 'activity' holds 5.48"):
        fit_task(table("active", "activity"), "classification")
    with pytest.raises(UserError, match=r"active hold 0/1 labels \(classification\), activity other numbers"):
        fit_task(table("active", "activity"), "auto")
    for columns, message in ((["label"], "column 'label' holds 'inactive' (data row 1)"), (["active", "activity"], "fit one task per call")):
        capsys.readouterr()
        assert main(["fit", str(path), "--target-columns", *columns, "--recipe", "ecfp", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


# --- several columns: one export, a column each ----------------------------------------------------
@pytest.fixture(scope="module")
def both_columns(activity_csv, tmp_path_factory) -> tuple[Path, dict]:
    """`gtscale fit activity.csv --target-columns active potent` with the default (kernel) recipe."""
    out = tmp_path_factory.mktemp("fit-both") / "run"
    assert main(["fit", str(activity_csv), "--target-columns", "active", "potent", "--out", str(out), "--no-progress"]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_several_columns_give_one_export_with_a_column_each_and_blank_cells_skip_only_their_column(both_columns, activity_csv, tmp_path):
    """Each column's members are the ones a fit of that column alone makes (a blank `potent` cell
    keeps its molecule in `active`'s fit); each column's chosen model is the mean of the members
    chosen for it, whatever the other column chose."""
    both, report = both_columns
    frame = pd.read_csv(activity_csv)
    alone = tmp_path / "potent"
    assert main(["fit", str(activity_csv), "--target-columns", "potent", "--recipe", "ecfp", "--out", str(alone), "--no-progress"]) == 0
    assert list(report["targets"]) == ["active", "potent"] and sum(report["molecules"].values()) == len(frame)
    for name, result in report["targets"].items():
        assert sum(result["molecules"].values()) == frame[name].notna().sum()
        assert sum(result["missing"].values()) == frame[name].isna().sum()
    assert report["targets"]["potent"]["members"]["ecfp"] == json.loads((alone / "report.json").read_text())["targets"]["potent"]["members"]["ecfp"]
    assert set(report["mean"]) == {"ecfp", "kernel", "chosen"} and "## Mean over the 2 targets" in (both / "report.md").read_text()
    assert report["mean"]["ecfp"]["rocauc"] == pytest.approx(np.mean([r["test"]["ecfp"]["rocauc"] for r in report["targets"].values()]))
    record = json.loads((both / "export" / "targets.json").read_text())
    assert record["targets"] == ["active", "potent"] and all(len(row) == 2 for row in record["shares"])

    saved = pd.read_csv(both / "test-predictions.csv")
    for name, result in report["targets"].items():
        chosen = result["selection"]["members"]
        np.testing.assert_allclose(saved[f"{name}_chosen_pred"], saved[[f"{name}_{m}_pred" for m in chosen]].mean(axis=1), rtol=1e-5, atol=1e-7)

    new = ROOT / "docs" / "tutorial" / "new-molecules.csv"
    assert main(["predict", str(both / "export"), "--input", str(new), "--out", str(tmp_path / "both.csv"), "--no-progress"]) == 0
    assert main(["predict", str(alone / "members" / "ecfp"), "--input", str(new), "--out", str(tmp_path / "alone.csv"), "--no-progress"]) == 0
    assert main(["predict", str(both / "members" / "ecfp"), "--input", str(new), "--out", str(tmp_path / "ecfp.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "both.csv")
    assert list(predicted.columns) == [*pd.read_csv(new).columns, "active_pred", "potent_pred", "reason"]
    assert predicted[["active_pred", "potent_pred"]].stack().between(0, 1).all() and len(predicted) == 20
    np.testing.assert_allclose(pd.read_csv(tmp_path / "ecfp.csv")["potent_pred"], pd.read_csv(tmp_path / "alone.csv")["potent_pred"], rtol=1e-6)

    # a rerun of one column into the same folder leaves a plain ensemble export, read as such
    again = shutil.copytree(both, tmp_path / "again")
    assert main(["fit", str(activity_csv), "--target-columns", "active", "--recipe", "ecfp", "--out", str(again), "--no-progress"]) == 0
    assert not (again / "export" / "targets.json").exists() and not (again / "members" / "ecfp" / "target-1").exists()
    assert not (again / "members" / "ecfp" / "targets.json").exists()
    assert main(["predict", str(again / "export"), "--input", str(new), "--out", str(tmp_path / "again.csv"), "--no-progress"]) == 0
    assert "active_pred" in pd.read_csv(tmp_path / "again.csv") and "potent_pred" not in pd.read_csv(tmp_path / "again.csv")


def test_an_export_of_several_columns_predicts_a_shard_folder_record_by_record(both_columns, activity_csv, tmp_path):
    both, _ = both_columns
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(activity_csv), "--target-columns", "active,potent", "--out", str(shards),
                 "--no-progress", "--lap-k", "0", "--svd-rank", "0"]) == 0
    assert main(["predict", str(both / "export"), "--input", str(shards), "--out", str(tmp_path / "shards.csv"), "--no-progress"]) == 0
    assert main(["predict", str(both / "export"), "--input", str(activity_csv), "--out", str(tmp_path / "csv.csv"), "--no-progress"]) == 0
    by_record, by_row = pd.read_csv(tmp_path / "shards.csv"), pd.read_csv(tmp_path / "csv.csv")
    assert len(by_record) == len(by_row)
    for name in ("active_pred", "potent_pred"):
        np.testing.assert_allclose(by_record[name], by_row[name].to_numpy()[by_record["idx"]], rtol=1e-5, atol=1e-7)


def test_a_crafted_targets_export_is_refused_in_one_line(both_columns, tmp_path, capsys):
    both, _ = both_columns
    pd.DataFrame({"smiles": ["CCO"]}).to_csv(tmp_path / "in.csv", index=False)

    def refusal(record: dict | None = None, link: str | None = None) -> str:
        export = tmp_path / "crafted"
        shutil.rmtree(export, ignore_errors=True)
        shutil.copytree(both / "export", export)
        good = json.loads((export / "targets.json").read_text())
        if record is not None:
            (export / "targets.json").write_text(json.dumps(good | record))
        if link is not None:
            shutil.rmtree(export / link)
            (export / link).symlink_to(export, target_is_directory=True)
        capsys.readouterr()
        assert main(["predict", str(export), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and not (tmp_path / "p.csv").exists(), lines
        return lines[0]

    members = json.loads((both / "export" / "targets.json").read_text())["members"]  # the members the fit chose for either column
    n = len(members)
    assert "targets.json: not a record gtscale wrote" in refusal({"members": [".."] * n})
    assert "targets.json: not a record gtscale wrote" in refusal({"members": members * 2})  # more members than rows of shares
    assert "give each member one share per target (2)" in refusal({"shares": [[1]] * n})
    assert "give each member one share per target (2)" in refusal({"shares": [["1", 0]] * n})
    assert f"shares of 'potent': give one weight per member ({n}), finite, >= 0 and not all 0" in refusal({"shares": [[1, 0]] * n})
    assert "targets must be distinct names" in refusal({"targets": ["active", "active"]})
    solo = tmp_path / "solo"
    shutil.copytree(both / "export", solo)
    shutil.copytree(both / "members" / "ecfp" / "target-0", solo / "solo")
    (solo / "targets.json").write_text(json.dumps({"format": "gtscale-targets", "targets": ["active", "potent"], "members": ["solo", members[0]],
                                                   "shares": [[1, 1], [0, 0]]}))
    capsys.readouterr()
    assert main(["predict", str(solo), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 2
    assert "member solo has a share of 'potent' but predicts active" in capsys.readouterr().err
    assert "leads back to" in refusal(link=members[0])


def test_several_regression_columns_are_reported_per_column_and_on_average(molecules_csv, tmp_path):
    """TPSA and a second column (TPSA / 10 + the molecule's length, blank in every third row):
    one SVR per column, RMSE per column and their mean, a column each from predict."""
    frame = pd.read_csv(molecules_csv)
    frame["z"] = frame["y"] / 10 + frame["smiles"].str.len()
    frame.loc[frame.index % 3 == 0, "z"] = np.nan
    path = tmp_path / "two.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "run"
    assert main(["fit", str(path), "--target-columns", "y,z", "--recipe", "ecfp", "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["task"] == "regression" and report["task_from"] == "detected" and list(report["targets"]) == ["y", "z"]
    assert report["targets"]["z"]["members"]["ecfp"]["C"] > 0
    assert sum(report["targets"]["z"]["missing"].values()) == frame["z"].isna().sum() - 1  # row 150 is unreadable: left out first
    assert report["mean"]["chosen"]["rmse"] == pytest.approx(np.mean([r["test"]["chosen"]["rmse"] for r in report["targets"].values()]))
    saved = pd.read_csv(out / "test-predictions.csv")
    assert saved["z_measured"].isna().any() and saved["z_chosen_pred"].notna().all()
    assert main(["predict", str(out / "export"), "--input", str(path), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    assert {"y_pred", "z_pred"} <= set(predicted.columns) and not {"y_mean", "z_mean"} & set(predicted.columns)


@pytest.mark.slow
def test_the_finetune_recipe_fine_tunes_one_head_of_both_binary_columns_with_masked_bce(activity_csv, tmp_path):
    """One fine-tuned seed (a few steps, loss bce) of both columns at once, a blank cell masked out of
    the loss, joins each column's ECFP + SVC, chosen per column by ROC-AUC on the valid split; its
    export predicts both columns' probabilities, and so does the chosen export."""
    from gtscale.format.manifest import load_manifest
    from gtscale.members.load import load_members

    steps = ["schedule.total_steps=6", "schedule.warmup_steps=1", "eval.every=3", "eval.patience=0", "checkpoint.every=3",
             "data.loader.batch_size=16", "logging.progress=false"]
    out = tmp_path / "ft"
    report = fit([activity_csv], out, target_columns=("active", "potent"), recipe="finetune", seeds=(0,), finetune_overrides=steps, progress=False)
    for result in report["targets"].values():
        assert set(result["test"]) == {"ecfp", "finetune", "chosen"} and result["selection"]["rule"] == "highest ROC-AUC on the valid split"
        assert 0 < result["members"]["finetune"]["best_valid"][0] <= 1
    manifest = load_manifest(out / "shards")
    assert manifest["task"]["type"] == "graph_classification" and manifest["task"]["target_names"] == ["active", "potent"]
    (member,), _ = load_members(out / "members" / "finetune")
    assert member.task.loss == "bce" and member.task.evaluator == "binary" and member.target_names == ["active", "potent"]
    saved = pd.read_csv(out / "test-predictions.csv")
    assert saved[["active_finetune_pred", "potent_finetune_pred"]].stack().between(0, 1).all()
    saved[["smiles"]].to_csv(tmp_path / "test.csv", index=False)
    assert main(["predict", str(out / "export"), "--input", str(tmp_path / "test.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    for name in ("active", "potent"):
        np.testing.assert_allclose(predicted[f"{name}_pred"], saved[f"{name}_chosen_pred"], rtol=1e-5, atol=1e-6)
