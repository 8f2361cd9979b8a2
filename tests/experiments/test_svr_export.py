"""The ECFP + SVR as a deployable member: its closed form equals scikit-learn's SVR, its export
holds tensors only (a crafted one runs nothing), and `gtscale predict` reads it beside model
exports, weighted, with a reason for every molecule it cannot read."""

import os

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.svm import SVR

from gtscale.cli import main
from gtscale.experiments.ecfp import TanimotoSVR, ecfp, ecfp_rows, tanimoto, write_svr_export
from gtscale.prep.sources.bundled import read_nci_tpsa

MANIFEST = {"dataset": "moleculeace-CHEMBL0_Ki-seed0", "task": {"type": "graph", "target_names": ["y"]}}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(SVR fitted on 120 NCI molecules' TPSA, the 40 molecules after them, their bits, export folder)."""
    table = read_nci_tpsa()
    bits = ecfp(table.smiles[:160])
    svr = TanimotoSVR.from_fitted(SVR(kernel="precomputed", C=10.0).fit(tanimoto(bits[:120], bits[:120]), table.targets[:120, 0]), bits[:120], 10.0)
    export = write_svr_export(tmp_path_factory.mktemp("svr") / "export", svr, MANIFEST)
    return svr, table.smiles[120:160], bits[120:], export


def test_the_closed_form_is_scikit_learns_svr(fitted):
    svr, _, bits, _ = fitted
    table = read_nci_tpsa()
    train = ecfp(table.smiles[:120])
    reference = SVR(kernel="precomputed", C=10.0).fit(tanimoto(train, train), table.targets[:120, 0]).predict(tanimoto(bits, train))
    np.testing.assert_allclose(svr.predict(bits), reference, rtol=0, atol=1e-9)
    assert len(svr.support) < 120 or np.abs(svr.coef).max() <= 10.0 + 1e-9  # a dual solution, bounded by C


def test_the_export_is_tensors_only_with_its_bits_packed(fitted):
    svr, _, _, export = fitted
    state = torch.load(export / "model.pt", weights_only=True)
    assert state["support"].dtype == torch.uint8 and state["support"].shape == (len(svr.support), 2048 // 8)
    assert state["coef"].dtype == torch.float32  # floating tensors are fp32, like every export's


def test_predict_with_the_svr_alone_and_weighted_beside_another_member(fitted, tmp_path):
    svr, smiles, bits, export = fitted
    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": [*smiles, "C1CC", ""]}).to_csv(csv, index=False)
    assert main(["predict", str(export), "--input", str(csv), "--out", str(tmp_path / "one.csv"), "--no-progress"]) == 0
    one = pd.read_csv(tmp_path / "one.csv", keep_default_na=False)
    np.testing.assert_allclose(one["y_pred"][:40].astype(float), svr.predict(bits), rtol=1e-5)
    assert list(one["reason"][40:]) == ["invalid_smiles", "empty_smiles"] and list(one["y_pred"][40:]) == ["", ""]

    # a second SVR member that predicts 1.0 more: weights 1 3 put the mean 0.75 above the first
    shifted = tmp_path / "shifted"
    write_svr_export(shifted, TanimotoSVR(svr.support, svr.coef, svr.intercept + 1.0, svr.C), MANIFEST)
    assert main(["predict", str(export), str(shifted), "--weights", "1", "3", "--input", str(csv), "--out", str(tmp_path / "two.csv"),
                 "--no-progress"]) == 0
    two = pd.read_csv(tmp_path / "two.csv")
    np.testing.assert_allclose(two["y_mean"][:40], svr.predict(bits) + 0.75, rtol=1e-5)
    np.testing.assert_allclose(two["y_std"][:40], np.sqrt(0.25 * 0.75 ** 2 + 0.75 * 0.25 ** 2), rtol=1e-4)


def test_bad_weights_and_a_shard_folder_input_are_one_line_errors(fitted, tmp_path, capsys):
    _, smiles, _, export = fitted
    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": smiles}).to_csv(csv, index=False)
    assert main(["predict", str(export), "--weights", "1", "2", "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    assert "--weights: give one weight per export (1)" in capsys.readouterr().err
    shards = tmp_path / "shards"
    labelled = tmp_path / "labelled.csv"
    pd.DataFrame({"smiles": smiles, "y": np.arange(len(smiles), dtype=float)}).to_csv(labelled, index=False)
    assert main(["shard", "smiles-csv", "--input", str(labelled), "--target-columns", "y", "--out", str(shards), "--no-progress",
                 "--lap-k", "0", "--svd-rank", "0"]) == 0
    capsys.readouterr()
    assert main(["predict", str(export), "--input", str(shards), "--out", str(tmp_path / "p.csv")]) == 2
    assert "an SVR export (ECFP + SVR, or the kernel SVR) reads SMILES" in capsys.readouterr().err and not (tmp_path / "p.csv").exists()


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_a_crafted_or_misshapen_svr_export_runs_nothing_and_is_refused(fitted, tmp_path, capsys, monkeypatch):
    svr, smiles, _, export = fitted
    monkeypatch.chdir(tmp_path)
    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": smiles}).to_csv(csv, index=False)
    crafted = tmp_path / "crafted"
    write_svr_export(crafted, svr, MANIFEST)
    torch.save({"support": _Payload()}, crafted / "model.pt")
    assert main(["predict", str(crafted), "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.pt: refused: loading it would run code" in err[0], err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "p.csv").exists()

    misshapen = tmp_path / "misshapen"
    write_svr_export(misshapen, TanimotoSVR(svr.support[:, :1000], svr.coef, svr.intercept, svr.C), MANIFEST)
    assert main(["predict", str(misshapen), "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "do not fit a 2048-bit SVR" in err[0] and not (tmp_path / "p.csv").exists()


def test_unread_smiles_give_zero_bits_and_their_reason():
    bits, reasons = ecfp_rows(["CCO", "not a molecule", "", "C" * 20_000, "C" * 600], max_atoms=512)
    assert reasons == ["", "invalid_smiles", "empty_smiles", "smiles_too_long", "too_many_nodes"]
    assert bits[1:].sum() == 0 and bits[0].sum() > 0
    assert ecfp_rows(["C" * 600], max_atoms=600)[1] == [""]
