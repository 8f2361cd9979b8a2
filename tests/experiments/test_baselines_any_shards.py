"""`gtscale baseline ecfp` and `gtscale baseline kernel` on a user's own CSV, sharded with `gtscale
shard smiles-csv`: the molecules come back from the shards' records, split as the shards hold them
(a row the sharder rejected and a row without a label are in no split), C is chosen by
cross-validation on train and valid alone, and a 0/1 classification target gets an SVC scored by
ROC-AUC, calibrated by Platt's sigmoid, whose export predicts scikit-learn's probabilities."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.svm import SVC

from export_fixtures import model_export
from gtscale.cli import main
from gtscale.members.fingerprints import ecfp, tanimoto
from gtscale.members.svr import SELECTION, SELECTION_CLASSIFIER, SVR_C, fit_svr
from gtscale.sweep import read_rows
from gtscale.prep.sources.bundled import read_nci_tpsa

ROWS = 160
BAD_ROW, UNLABELLED_ROW = 9, 3  # a test row RDKit cannot read, a train row without its label


@pytest.fixture(scope="module")
def user_csv(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """160 NCI molecules with TPSA, a 0/1 label (TPSA above 60) and a split column (8:1:1)."""
    table = read_nci_tpsa()
    frame = pd.DataFrame({"smiles": table.smiles[:ROWS], "tpsa": table.targets[:ROWS, 0].astype(float)})
    frame["active"] = (frame["tpsa"] > 60).astype(int)
    frame["split"] = np.array(["train"] * 8 + ["valid", "test"])[np.arange(ROWS) % 10]
    frame.loc[BAD_ROW, "smiles"] = "C1CC"
    frame.loc[UNLABELLED_ROW, ["tpsa"]] = np.nan
    path = tmp_path_factory.mktemp("csv") / "mols.csv"
    frame.to_csv(path, index=False)
    return path, frame


def shard(csv: Path, out: Path, *options: str) -> Path:
    assert main(["shard", "smiles-csv", "--input", str(csv), "--split-column", "split", "--out", str(out), "--no-progress",
                 "--svd-rank", "0", "--lap-k", "0", *options]) == 0
    return out


@pytest.fixture(scope="module")
def regression_shards(user_csv, tmp_path_factory) -> Path:
    return shard(user_csv[0], tmp_path_factory.mktemp("tpsa"), "--target-columns", "tpsa")


@pytest.fixture(scope="module")
def classification_shards(user_csv, tmp_path_factory) -> Path:
    return shard(user_csv[0], tmp_path_factory.mktemp("active"), "--target-columns", "active", "--task-type", "graph_classification")


def rows_of(frame: pd.DataFrame, split: str, target: str) -> np.ndarray:
    """The CSV rows a split holds: the sharder keeps the readable ones, the baselines the labelled ones."""
    return np.array([i for i in range(ROWS) if frame["split"][i] == split and i != BAD_ROW and not np.isnan(frame[target][i])])


def test_the_ecfp_baseline_fits_a_smiles_csv_shard_folder_split_as_the_shards_hold_it(user_csv, regression_shards, tmp_path, capsys):
    csv, frame = user_csv
    out = tmp_path / "ecfp"
    assert main(["baseline", "ecfp", str(regression_shards), "--out", str(out), "--seeds", "0", "--trees", "10"]) == 0
    svr_row, rf_row = read_rows(out)
    assert [svr_row["label"], rf_row["label"]] == ["ECFP4 + SVR", "ECFP4 + RF"] and svr_row["target"] == "tpsa"
    assert set(svr_row["summary"]) == {"rmse", "mae"}  # no cliff RMSE: not a MoleculeACE set
    saved = np.load(out / "svr-test.npz")
    test = rows_of(frame, "test", "tpsa")
    assert saved["idx"].tolist() == test.tolist() and BAD_ROW not in test  # record idx = CSV row
    np.testing.assert_allclose(saved["y_true"][:, 0], frame["tpsa"][test], rtol=1e-6)
    # C chosen on train and valid alone: the SVR of those CSV rows predicts the same
    fitted = {s: rows_of(frame, s, "tpsa") for s in ("train", "valid")}
    assert UNLABELLED_ROW not in fitted["train"]
    bits = {s: ecfp(frame["smiles"][rows].tolist()) for s, rows in fitted.items()}
    svr = fit_svr(bits, {s: frame["tpsa"][rows].to_numpy() for s, rows in fitted.items()})
    assert svr_row["runs"][0]["chosen"] == {"C": svr.C, "selection": SELECTION}
    np.testing.assert_allclose(saved["y_pred"][:, 0], svr.predict(ecfp(frame["smiles"][test].tolist())), rtol=1e-9, atol=1e-9)
    assert svr_row["summary"]["rmse"]["mean"] == pytest.approx(float(np.sqrt(np.mean((saved["y_pred"] - saved["y_true"]) ** 2))))
    # its export predicts the same for the CSV's test molecules, in a column named after the target
    test_csv = tmp_path / "test.csv"
    frame.loc[test, ["smiles"]].to_csv(test_csv, index=False)
    capsys.readouterr()
    assert main(["predict", str(out / "export"), "--input", str(test_csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["tpsa_pred"], saved["y_pred"][:, 0], rtol=1e-4)


def test_the_kernel_baseline_fits_a_smiles_csv_shard_folder(user_csv, regression_shards, tmp_path):
    frame = user_csv[1]
    backbone = model_export(tmp_path / "backbone")
    out = tmp_path / "kernel"
    assert main(["baseline", "kernel", str(regression_shards), "--backbone", str(backbone), "--out", str(out)]) == 0
    (row,) = read_rows(out)
    saved = np.load(out / "kernel-test.npz")
    assert saved["idx"].tolist() == rows_of(frame, "test", "tpsa").tolist()
    assert row["runs"][0]["chosen"]["selection"] == SELECTION and row["runs"][0]["chosen"]["cv_rmse"] > 0
    assert row["summary"]["rmse"]["mean"] == pytest.approx(float(np.sqrt(np.mean((saved["y_pred"] - saved["y_true"]) ** 2))))
    assert (out / "export" / "model.pt").is_file()


def test_a_binary_target_gets_an_svc_scored_by_roc_auc(user_csv, classification_shards, tmp_path, capsys):
    frame = user_csv[1]
    out = tmp_path / "svc"
    assert main(["baseline", "ecfp", str(classification_shards), "--out", str(out), "--seeds", "0", "--trees", "10"]) == 0
    svc_row, rf_row = read_rows(out)
    assert [svc_row["label"], rf_row["label"]] == ["ECFP4 + SVC", "ECFP4 + RF"]
    assert set(svc_row["summary"]) == set(rf_row["summary"]) == {"rocauc"}
    saved = np.load(out / "svr-test.npz")
    assert svc_row["summary"]["rocauc"]["mean"] == pytest.approx(roc_auc_score(saved["y_true"][:, 0], saved["y_pred"][:, 0]))
    assert 0.5 < svc_row["summary"]["rocauc"]["mean"] <= 1.0 and 0.5 < rf_row["summary"]["rocauc"]["mean"] <= 1.0
    # scikit-learn's SVC, C by stratified 5-fold ROC-AUC on train ∪ valid, calibrated by Platt's sigmoid
    # on the same folds: the logits of its probabilities, which the export predicts
    pool = np.concatenate([rows_of(frame, "train", "active"), rows_of(frame, "valid", "active")])
    bits, labels = ecfp(frame["smiles"][pool].tolist()), frame["active"][pool].to_numpy()
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    search = GridSearchCV(SVC(kernel="precomputed"), {"C": list(SVR_C)}, cv=folds, scoring="roc_auc").fit(tanimoto(bits, bits), labels)
    calibrated = CalibratedClassifierCV(SVC(kernel="precomputed", C=search.best_params_["C"]), method="sigmoid", cv=folds,
                                        ensemble=False).fit(tanimoto(bits, bits), labels)
    test = rows_of(frame, "test", "active")
    expected = calibrated.predict_proba(tanimoto(ecfp(frame["smiles"][test].tolist()), bits))[:, 1]
    np.testing.assert_allclose(1.0 / (1.0 + np.exp(-saved["y_pred"][:, 0])), expected, rtol=1e-9, atol=1e-12)
    assert svc_row["runs"][0]["chosen"] == {"C": float(search.best_params_["C"]), "selection": SELECTION_CLASSIFIER}
    test_csv = tmp_path / "test.csv"
    frame.loc[test, ["smiles"]].to_csv(test_csv, index=False)
    capsys.readouterr()
    assert main(["predict", str(out / "export"), "--input", str(test_csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["active_pred"], expected, rtol=1e-4, atol=1e-6)

    kernel = tmp_path / "kernel"
    assert main(["baseline", "kernel", str(classification_shards), "--backbone", str(model_export(tmp_path / "backbone")),
                 "--out", str(kernel)]) == 0
    (row,) = read_rows(kernel)
    saved = np.load(kernel / "kernel-test.npz")
    assert row["label"].endswith("kernel SVC") and row["runs"][0]["chosen"]["selection"] == SELECTION_CLASSIFIER
    assert 0 < row["runs"][0]["chosen"]["cv_rocauc"] <= 1
    assert row["summary"]["rocauc"]["mean"] == pytest.approx(roc_auc_score(saved["y_true"][:, 0], saved["y_pred"][:, 0]))
    assert (kernel / "export" / "model.pt").is_file()


def test_what_a_baseline_cannot_fit_is_one_line(user_csv, nci_shards, ego_shards, tmp_path, capsys):
    csv = user_csv[0]
    both = shard(csv, tmp_path / "both", "--target-columns", "tpsa,active")
    cases = [
        (["ecfp", str(both)], "has 2 targets (tpsa, active); a baseline fits one: pass --target NAME"),
        (["ecfp", str(both), "--target", "logp"], "--target 'logp': not a target of"),
        (["ecfp", str(both), "--target", "tpsa", "--split", "valid"], "--split valid: the baselines fit on train and valid"),
        (["ecfp", str(shard(csv, tmp_path / "tpsa-as-class", "--target-columns", "tpsa", "--task-type", "graph_classification"))],
         "task graph_classification, but target 'tpsa' holds"),
        (["ecfp", str(nci_shards), "--target", "tpsa"], "keeps no SMILES (its shards were written before records kept them)"),
        (["ecfp", str(ego_shards[1])], "a node task"),
        (["kernel", str(ego_shards[1]), "--backbone", str(model_export(tmp_path / "backbone"))], "a node task"),
    ]
    capsys.readouterr()
    for argv, message in cases:
        assert main(["baseline", *argv, "--out", str(tmp_path / "out")]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert not (tmp_path / "out").exists()
    # the target named: the baseline fits it
    assert main(["baseline", "ecfp", str(both), "--target", "active", "--models", "svr", "--out", str(tmp_path / "named")]) == 0
    assert json.loads((tmp_path / "named" / "sweep.json").read_text())["rows"][0]["target"] == "active"
