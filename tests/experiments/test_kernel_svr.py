"""The kernel arm: an SVR on an ECFP4 similarity (Tanimoto or MinMax) + an RBF kernel on a gtscale
export's representation. Its closed form is scikit-learn's SVR; cross-validation picks the
representation when it carries the target, and MinMax when the counts do; `gtscale
moleculeace-table --arms kernel` scores it beside ECFP + SVR on the same split."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.model_selection import KFold, cross_val_score
from sklearn.svm import SVR

from gtscale.cli import main
from gtscale.members import kernel_svr
from gtscale.members.fingerprints import ecfp, minmax, tanimoto
from gtscale.members.svr import SELECTION, SVR_C, fit_svr
from gtscale.experiments.kernel_baseline import PREDICTIONS
from gtscale.members.kernel_svr import combined, fit_kernel_svr
from gtscale.sweep import read_rows
from gtscale.format.manifest import load_manifest
from gtscale.format.record_meta import split_smiles
from gtscale.prep.sources.bundled import read_nci_tpsa

from test_moleculeace_table import SET, tiny_config
from export_fixtures import save_tensors


CUT = {"train": slice(0, 100), "valid": slice(100, 125), "test": slice(125, 150)}


@pytest.fixture(scope="module")
def counted():
    """(ECFP4 counts, y) of 150 NCI molecules split 100 / 25 / 25, TPSA standardised."""
    table = read_nci_tpsa()
    counts, y = ecfp(table.smiles[:150], counts=True), table.targets[:150, 0].astype(np.float64)
    y = (y - y.mean()) / y.std()
    return {k: counts[s] for k, s in CUT.items()}, {k: y[s] for k, s in CUT.items()}


@pytest.fixture(scope="module")
def molecules(counted):
    """(ECFP4 bits, y) of the same molecules."""
    counts, y = counted
    return {k: (c > 0).astype(np.uint8) for k, c in counts.items()}, y


def test_ecfp_counts_are_the_bits_counted_and_minmax_is_sum_min_over_sum_max():
    smiles = read_nci_tpsa().smiles[:300]
    counts, bits = ecfp(smiles, counts=True), ecfp(smiles)
    assert counts.max() > 1 and np.array_equal(counts > 0, bits == 1)  # RDKit's bits are exactly the counts that are not 0
    a, b = counts[:40], counts[40:70]
    brute = np.array([[np.minimum(u, v).sum() / np.maximum(u, v).sum() for v in b.astype(np.int64)] for u in a.astype(np.int64)])
    np.testing.assert_allclose(minmax(a, b), brute, rtol=1e-12)
    np.testing.assert_allclose(minmax(bits[:40], bits[40:70]), tanimoto(bits[:40], bits[40:70]), rtol=1e-12)  # on bits, Tanimoto


@pytest.mark.parametrize("similarity", kernel_svr.SIMILARITIES)
def test_closed_form_equals_scikit_learns_svr_on_the_combined_kernel(counted, similarity, monkeypatch):
    counts, y = counted
    monkeypatch.setattr(kernel_svr, "SIMILARITIES", (similarity,))
    rng = np.random.default_rng(0)
    z = {k: rng.normal(size=(len(v), 6)) for k, v in y.items()}
    svr = fit_kernel_svr(counts, z, y)
    assert svr.similarity == similarity
    pool_counts, pool_z, pool_y = (np.concatenate([d["train"], d["valid"]]) for d in (counts, z, y))  # fitted on both
    np.testing.assert_allclose(svr.z_mean, pool_z.mean(0), atol=1e-12)
    zs, test_z = (pool_z - svr.z_mean) / svr.z_std, (z["test"] - svr.z_mean) / svr.z_std
    fitted = combined(pool_counts, zs, pool_counts, zs, svr.weight, svr.gamma, similarity)
    reference = SVR(kernel="precomputed", C=svr.C).fit(fitted, pool_y)
    expected = reference.predict(combined(counts["test"], test_z, pool_counts, zs, svr.weight, svr.gamma, similarity))
    np.testing.assert_allclose(svr.predict(counts["test"], z["test"]), expected, rtol=1e-9, atol=1e-9)


def test_cross_validation_takes_minmax_when_the_counts_carry_the_target(counted):
    """A target that counts atom environments (the count of the most variable bit): Tanimoto sees
    only whether each is there, MinMax how often."""
    counts, _ = counted
    pool = np.concatenate([counts["train"], counts["valid"]]).astype(np.float64)
    bit = int(np.argmax(pool.var(0)))
    y = {k: c[:, bit].astype(np.float64) for k, c in counts.items()}
    rng = np.random.default_rng(2)
    noise = {k: rng.normal(size=(len(v), 4)) for k, v in y.items()}
    svr = fit_kernel_svr(counts, noise, y)
    assert svr.similarity == "minmax"
    rmse = lambda pred: float(np.sqrt(np.mean((pred - y["test"]) ** 2)))  # noqa: E731
    plain = fit_svr({k: (c > 0).astype(np.uint8) for k, c in counts.items()}, y)
    assert rmse(svr.predict(counts["test"], noise["test"])) < rmse(plain.predict((counts["test"] > 0).astype(np.uint8)))


def test_the_svrs_choose_by_five_fold_cross_validation_over_train_and_valid(molecules):
    """MoleculeACE's protocol: every hyperparameter candidate scored by the mean RMSE of 5 shuffled
    folds of train ∪ valid, the best refitted on all of them (it once chose on valid alone and fitted
    train alone: 25 molecules deciding, 25 unused)."""
    bits, y = molecules
    pool_bits, pool_y = np.concatenate([bits["train"], bits["valid"]]), np.concatenate([y["train"], y["valid"]])
    kernel = tanimoto(pool_bits, pool_bits)
    folds = KFold(5, shuffle=True, random_state=0)
    fold_rmse = {C: -cross_val_score(SVR(kernel="precomputed", C=C), kernel, pool_y, cv=folds, scoring="neg_root_mean_squared_error").mean()
                 for C in SVR_C}
    svr = fit_svr(bits, y)
    assert svr.C == min(SVR_C, key=fold_rmse.get)
    expected = SVR(kernel="precomputed", C=svr.C).fit(kernel, pool_y).predict(tanimoto(bits["test"], pool_bits))
    np.testing.assert_allclose(svr.predict(bits["test"]), expected, rtol=1e-9, atol=1e-9)


def test_cross_validation_takes_the_representation_when_it_carries_the_target(counted, molecules):
    (counts, y), (bits, _) = counted, molecules
    rng = np.random.default_rng(1)
    z = {k: np.stack([v + 0.05 * rng.normal(size=len(v)), rng.normal(size=len(v))], 1) for k, v in y.items()}
    svr, plain = fit_kernel_svr(counts, z, y), fit_svr(bits, y)
    assert svr.weight > 0
    rmse = lambda pred: float(np.sqrt(np.mean((pred - y["test"]) ** 2)))  # noqa: E731
    assert rmse(svr.predict(counts["test"], z["test"])) < 0.75 * rmse(plain.predict(bits["test"]))  # 0.50 against 0.80
    # noise alone: the fingerprint similarity alone (weight 0) is among the candidates and stays ahead
    noise = {k: rng.normal(size=(len(v), 4)) for k, v in y.items()}
    assert rmse(fit_kernel_svr(counts, noise, y).predict(counts["test"], noise["test"])) <= 1.2 * rmse(plain.predict(bits["test"]))


@pytest.mark.slow
def test_the_table_scores_the_kernel_arm_of_a_pretrained_export(tmp_path, capsys):
    out = tmp_path / "ace"
    common = ["moleculeace-table", "--out", str(out), "--sets", SET, "--shard-args", "--lap-k 0 --svd-rank 0"]
    # a tiny trained export stands in for the pretraining's
    assert main([*common, "--arms", "ecfp", "scratch", "--seeds", "0", "--config", f"scratch={tiny_config(tmp_path / 'tiny.yaml')}"]) == 0
    assert main(["export", str(out / SET / "scratch" / "seed-0"), "--out", str(tmp_path / "backbone")]) == 0
    capsys.readouterr()
    assert main([*common, "--arms", "ecfp", "kernel", "--init-from", str(tmp_path / "backbone")]) == 0
    table = json.loads((out / "table.json").read_text())
    row = read_rows(out / SET / "kernel")[0]
    assert table["sets"][SET]["kernel"] == {m: row["summary"][m] for m in ("rmse", "cliff_rmse")}
    chosen = row["runs"][0]["chosen"]
    assert set(chosen) == {"C", "similarity", "weight", "gamma", "selection", "cv_rmse"} and chosen["gamma"] > 0 and chosen["selection"] == SELECTION
    assert chosen["similarity"] in kernel_svr.SIMILARITIES and 0 < chosen["cv_rmse"] < 10  # the chosen (S, w, C)'s mean fold RMSE, in the target's units
    saved = np.load(out / SET / "kernel" / PREDICTIONS.format(split="test"))
    test_idx, test_smiles = split_smiles(out / "shards" / SET, load_manifest(out / "shards" / SET), "test")
    assert saved["idx"].tolist() == test_idx.tolist()
    assert row["summary"]["rmse"]["mean"] == pytest.approx(float(np.sqrt(np.mean((saved["y_pred"] - saved["y_true"]) ** 2))), rel=1e-9)
    assert "| ECFP4 + SVR | ECFP4 + gtscale kernel SVR |" in capsys.readouterr().out

    # its export, the SVR with its backbone, is what `gtscale predict` reads: the same predictions
    csv = tmp_path / "test.csv"
    pd.DataFrame({"smiles": test_smiles + ["not a molecule"]}).to_csv(csv, index=False)
    kernel_export = out / SET / "kernel" / "export"
    assert main(["predict", str(kernel_export), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    np.testing.assert_allclose(predicted["y_pred"][:-1].astype(float), saved["y_pred"][:, 0], rtol=1e-4, atol=1e-4)
    assert predicted["reason"].tolist()[-1] == "invalid_smiles" and predicted["y_pred"].tolist()[-1] == ""
    # a kernel export whose tensors do not fit one SVR is one line, exit 2
    broken = tmp_path / "broken"
    shutil.copytree(kernel_export, broken)
    state = torch.load(broken / "model.pt", weights_only=True)
    state["coef"] = state["coef"][:-1]
    save_tensors(broken, state)
    assert main(["predict", str(broken), "--input", str(csv), "--out", str(tmp_path / "b.csv"), "--no-progress"]) == 2
    assert "do not fit one kernel SVR" in capsys.readouterr().err and not (tmp_path / "b.csv").exists()

    # another backbone for the same folder is refused, never overwritten
    other = tmp_path / "other"
    (other).mkdir()
    for f in (tmp_path / "backbone").iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    assert main([*common, "--arms", "kernel", "--init-from", str(other)]) == 2
    assert "holds the kernel arm of backbone" in capsys.readouterr().err


def test_the_kernel_arm_without_a_pretrained_export_is_refused_before_sharding(tmp_path, capsys):
    assert main(["moleculeace-table", "--out", str(tmp_path / "ace"), "--sets", SET, "--arms", "kernel", "--init-from", str(tmp_path / "none")]) == 2
    assert "--arms kernel: reads a pretrained export" in capsys.readouterr().err
    assert not (tmp_path / "ace").exists()
