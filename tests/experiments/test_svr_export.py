"""The ECFP + SVR as a deployable member: its closed form equals scikit-learn's SVR, its export
holds tensors only (a crafted one runs nothing), and `gtscale predict` reads it beside model
exports, weighted, with a reason for every molecule it cannot read; a tampered SVR export (its own or
the kernel SVR's) is refused as it is read, in one line naming the file and key."""

import os

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.svm import SVR

from gtscale.cli import main
from gtscale.members.fingerprints import ecfp, ecfp_rows, tanimoto
from gtscale.members.svr import TanimotoSVR, write_svr_export
from gtscale.prep.sources.bundled import read_nci_tpsa
from export_fixtures import save_tensors

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


def test_bad_weights_are_a_one_line_error(fitted, tmp_path, capsys):
    _, smiles, _, export = fitted
    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": smiles}).to_csv(csv, index=False)
    assert main(["predict", str(export), "--weights", "1", "2", "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    assert "--weights: give one weight per export (1)" in capsys.readouterr().err


def test_predict_on_a_shard_folder_reads_each_records_smiles(fitted, tmp_path):
    """The SVR predicts a shard folder's records from the SMILES they keep: the same values, record by
    record, as from the CSV they were sharded from."""
    svr, smiles, bits, export = fitted
    labelled = tmp_path / "labelled.csv"
    pd.DataFrame({"smiles": smiles, "y": np.arange(len(smiles), dtype=float)}).to_csv(labelled, index=False)
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(labelled), "--target-columns", "y", "--out", str(shards), "--no-progress",
                 "--lap-k", "0", "--svd-rank", "0"]) == 0
    assert main(["predict", str(export), "--input", str(shards), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    table = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert len(table) == len(smiles) and (table["reason"] == "").all()
    np.testing.assert_allclose(table["y_pred"].astype(float), svr.predict(bits[table["idx"].to_numpy()]), rtol=1e-5)


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


# --- a tampered SVR export is refused as it is read: one line naming the file and key, exit 2 ------
def _predict_refusal(export, tmp_path, capsys) -> str:
    import pandas as pd

    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": ["CCO", "c1ccccc1O"]}).to_csv(csv, index=False)
    capsys.readouterr()
    assert main(["predict", str(export), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and not (tmp_path / "p.csv").exists(), lines
    return lines[0]


def _with_tensor(export, tmp_path, name, change):
    import shutil

    out = shutil.copytree(export, tmp_path / "tampered")
    state = torch.load(out / "model.pt", weights_only=True)
    state[name] = change(state[name])
    save_tensors(out, state)
    return out


def _with_config(export, tmp_path, key, value):
    import shutil

    import yaml

    out = shutil.copytree(export, tmp_path / "tampered")
    config = yaml.safe_load((out / "model.yaml").read_text())
    config[key] = value
    (out / "model.yaml").write_text(yaml.safe_dump(config))
    return out


def _nan_at_0(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


@pytest.mark.parametrize("name,change,fragment", [
    ("coef", _nan_at_0, "model.pt: tensor coef holds NaN or infinity"),  # once: every prediction blank, no reason, exit 0
    ("intercept", lambda t: torch.full_like(t, float("inf")), "model.pt: tensor intercept holds NaN or infinity"),
    ("coef", lambda t: t[:-1], "model.pt: its support"),
    ("support", lambda t: t[:, :100], "model.pt: its support"),
])
def test_a_tampered_svr_tensor_is_refused(fitted, tmp_path, capsys, name, change, fragment):
    line = _predict_refusal(_with_tensor(fitted[3], tmp_path, name, change), tmp_path, capsys)
    assert str(tmp_path / "tampered") in line and fragment in line, line


@pytest.mark.parametrize("key,value,fragment", [
    ("C", -1.0, "model.yaml: C: must be > 0, got -1.0"),
    ("bits", 1024, "model.yaml: radius 2, bits 1024: an SVR export reads ECFP4"),
    ("radius", "two", "model.yaml: radius: expected an integer, got 'two'"),
])
def test_a_tampered_svr_config_is_refused(fitted, tmp_path, capsys, key, value, fragment):
    line = _predict_refusal(_with_config(fitted[3], tmp_path, key, value), tmp_path, capsys)
    assert fragment in line, line


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from export_fixtures import kernel_export, model_export

    root = tmp_path_factory.mktemp("kernel")
    return kernel_export(root / "kernel", model_export(root / "backbone"))


@pytest.mark.parametrize("key,value,fragment", [
    ("gamma", -1.0, "model.yaml: gamma: must be > 0, got -1.0"),  # once: exp of +‖z‖² · 1 overflowed to blank rows
    ("gamma", float("inf"), "model.yaml: gamma: must be > 0, got inf"),
    ("weight", float("nan"), "model.yaml: weight: must be >= 0, got nan"),
    ("C", 0.0, "model.yaml: C: must be > 0, got 0.0"),
    ("similarity", "cosine", "model.yaml: similarity:"),
    ("similarity", "minmax", "model.pt: its support (12, 256)"),  # MinMax reads counts, not the packed bits Tanimoto's export keeps
])
def test_a_tampered_kernel_svr_config_is_refused(kernel, tmp_path, capsys, key, value, fragment):
    line = _predict_refusal(_with_config(kernel, tmp_path, key, value), tmp_path, capsys)
    assert fragment in line, line


@pytest.mark.parametrize("name,change,fragment", [
    ("z", _nan_at_0, "model.pt: tensor z holds NaN or infinity"),
    ("z_std", lambda t: -t, "model.pt: tensor z_std must be positive"),
    ("z", lambda t: t[:, :3], "model.pt: its support (12, 256), z (12, 3)"),
])
def test_a_tampered_kernel_svr_tensor_is_refused(kernel, tmp_path, capsys, name, change, fragment):
    line = _predict_refusal(_with_tensor(kernel, tmp_path, name, change), tmp_path, capsys)
    assert fragment in line, line


def test_a_minmax_kernel_export_keeps_the_counts_and_predicts_its_closed_form(tmp_path):
    from export_fixtures import SMILES, kernel_export, model_export

    from gtscale.members.fingerprints import ecfp
    from gtscale.members.kernel_svr import read_kernel_export
    from gtscale.inference import graph_representation, load_model_export
    from gtscale.models.export import read_export

    backbone = model_export(tmp_path / "backbone")
    export = read_export(kernel_export(tmp_path / "kernel", backbone, similarity="minmax"))
    assert export.config["similarity"] == "minmax" and export.state["support"].shape == (12, 2048)
    svr, _ = read_kernel_export(export.config, export.state, "model.pt")
    np.testing.assert_array_equal(svr.counts, ecfp(read_nci_tpsa().smiles[10:22], counts=True))  # the counts, above 1 where they are
    assert svr.counts.max() > 1 and svr.similarity == "minmax"

    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": SMILES}).to_csv(csv, index=False)
    assert main(["predict", str(tmp_path / "kernel"), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    saved = read_export(backbone)
    z, _ = graph_representation(load_model_export(saved.folder, saved.config, saved.state, saved.meta), SMILES)
    expected = svr.predict(ecfp(SMILES, counts=True), z)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["tpsa_pred"].to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_kernel_export_without_a_similarity_reads_as_tanimoto(kernel, tmp_path):
    """model.yaml without `similarity` (a kernel export of an earlier gtscale): Tanimoto on its packed
    bits, predicting what the export with the key predicts."""
    import yaml

    from export_fixtures import SMILES

    bare = _with_config(kernel, tmp_path, "similarity", "tanimoto")
    config = yaml.safe_load((bare / "model.yaml").read_text())
    del config["similarity"]
    (bare / "model.yaml").write_text(yaml.safe_dump(config))
    csv = tmp_path / "in.csv"
    pd.DataFrame({"smiles": SMILES}).to_csv(csv, index=False)
    for export, out in ((kernel, "with.csv"), (bare, "without.csv")):
        assert main(["predict", str(export), "--input", str(csv), "--out", str(tmp_path / out), "--no-progress"]) == 0
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "with.csv")["tpsa_pred"], pd.read_csv(tmp_path / "without.csv")["tpsa_pred"])
