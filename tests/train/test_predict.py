"""`gtscale predict` on a tiny trained export: the same predictions as `gtscale evaluate` gives for
the same molecules, an ensemble's mean and std over its members, and rows RDKit cannot read."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from gtscale.cli import main
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.sources.descriptors import descriptor_names

pytestmark = pytest.mark.slow


def tpsa_csv(path: Path, rows: int = 160) -> Path:
    """The first `rows` NCI molecules with TPSA, split 60/20/20 by row number."""
    table = read_nci_tpsa()
    split = ["valid" if i % 5 == 3 else "test" if i % 5 == 4 else "train" for i in range(rows)]
    pd.DataFrame({"smiles": table.smiles[:rows], "tpsa": table.targets[:rows, 0], "split": split}).to_csv(path, index=False)
    return path


def train_tiny(shards: Path, run_dir: Path, model_overrides: dict | None = None) -> Path:
    """Three steps of a tiny EGT in one process; returns the run folder."""
    config = run_dir.parent / f"{run_dir.name}.yaml"
    config.write_text(yaml.safe_dump({
        "run_dir": str(run_dir),
        "data": {"shards": str(shards), "loader": {"batching": "graphs", "batch_size": 16, "num_workers": 0}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1,
                            "svd_rank": 4, **(model_overrides or {})},
        "task": {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}, "target_shift": 60.0, "target_scale": 40.0},
        "optimizer": {"lr": 1e-3}, "schedule": {"total_steps": 3, "warmup_steps": 1},
        "checkpoint": {"every": 1000}, "eval": {"every": 0}, "logging": {"every": 1, "tensorboard": False, "progress": False},
    }))
    done = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(shard folder, the CSV it was made from, run folder, evaluate's test predictions by idx, export),
    trained on shards with molecule-level features (Morgan bits, standardised RDKit descriptors)
    and EGT's SVD encodings (the same for a molecule in a predict batch as in its shard)."""
    root = tmp_path_factory.mktemp("predict")
    csv = tpsa_csv(root / "tpsa.csv")
    shards = root / "shards"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(shards), "--no-progress", "--lap-k", "0", "--svd-rank", "4", "--graph-features", "morgan2048,rdkit2d"]) == 0
    run_dir = train_tiny(shards, root / "run")
    assert main(["evaluate", str(run_dir), "--split", "test", "--tag", "latest"]) == 0
    saved = np.load(next((run_dir / "eval").glob("test-step-*.npz")))
    export = next((run_dir / "export").glob("step-*"))
    model_cfg = yaml.safe_load((export / "model.yaml").read_text())
    assert model_cfg["head"]["graph_features"] == 2048 + len(descriptor_names())  # the head read them
    return shards, csv, run_dir, dict(zip(saved["idx"].tolist(), saved["y_pred"][:, 0].tolist())), export


def test_predict_equals_evaluate_and_marks_invalid_rows(trained, tmp_path):
    shards, csv, _, evaluated, export = trained
    frame = pd.read_csv(csv)
    test = frame[frame["split"] == "test"].copy()
    test["row"] = test.index  # smiles-csv idx = row number
    bad = pd.DataFrame({"smiles": ["C1CC", "", "not a molecule"], "row": [-1, -2, -3]})
    mixed = pd.concat([test.iloc[:5], bad, test.iloc[5:]], ignore_index=True)[["smiles", "row"]]
    mixed.to_csv(tmp_path / "mols.csv", index=False)
    assert main(["predict", str(export), "--input", str(tmp_path / "mols.csv"), "--out", str(tmp_path / "p.csv"),
                 "--batch-size", "7", "--no-progress"]) == 0
    out = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert list(out.columns) == ["smiles", "row", "tpsa_pred", "reason"] and len(out) == len(mixed)
    invalid = out[out["row"] < 0]
    assert invalid["reason"].tolist() == ["invalid_smiles", "empty_smiles", "invalid_smiles"]
    assert (invalid["tpsa_pred"] == "").all()  # an empty prediction, not a number
    valid = out[out["row"] >= 0]
    assert (valid["reason"] == "").all() and len(valid) == len(evaluated)
    predicted = valid["tpsa_pred"].astype(float).to_numpy()
    expected = np.array([evaluated[r] for r in valid["row"]])
    np.testing.assert_allclose(predicted, expected, rtol=1e-5, atol=1e-4)

    # a shard folder as input: the same records the evaluation read
    assert main(["predict", str(export), "--input", str(shards), "--splits", "test", "--out", str(tmp_path / "s.csv"), "--no-progress"]) == 0
    from_shards = pd.read_csv(tmp_path / "s.csv")
    assert set(from_shards["split"]) == {"test"} and from_shards["idx"].tolist() == sorted(evaluated)
    np.testing.assert_allclose(from_shards["tpsa_pred"], [evaluated[i] for i in from_shards["idx"]], rtol=1e-5, atol=1e-4)


def test_ensemble_mean_and_std_are_over_its_members(trained, tmp_path):
    _, csv, _, _, export = trained
    other = tmp_path / "other"
    shutil.copytree(export, other)
    state = torch.load(other / "model.pt", weights_only=True)
    last = max(k for k in state if k.startswith("head.") and k.endswith(".bias"))
    state[last] = state[last] + 0.5  # another member: every prediction moves by 0.5 × target_scale
    torch.save(state, other / "model.pt")
    single = []
    for i, member in enumerate([export, other]):
        assert main(["predict", str(member), "--input", str(csv), "--out", str(tmp_path / f"{i}.csv"), "--no-progress"]) == 0
        single.append(pd.read_csv(tmp_path / f"{i}.csv")["tpsa_pred"].to_numpy())
    np.testing.assert_allclose(single[1] - single[0], 20.0, rtol=1e-4)
    assert main(["predict", str(export), str(other), "--input", str(csv), "--out", str(tmp_path / "e.csv"), "--no-progress"]) == 0
    ensemble = pd.read_csv(tmp_path / "e.csv")
    assert {"tpsa_mean", "tpsa_std", "reason"} <= set(ensemble.columns) and "tpsa" in ensemble.columns  # the input's own column kept
    np.testing.assert_allclose(ensemble["tpsa_mean"], (single[0] + single[1]) / 2, rtol=1e-5)
    np.testing.assert_allclose(ensemble["tpsa_std"], np.abs(single[1] - single[0]) / 2, rtol=1e-4)


def test_an_export_without_its_shards_record_is_refused(trained, tmp_path, capsys):
    _, csv, _, _, export = trained
    old = tmp_path / "old"
    shutil.copytree(export, old)
    (old / "export.json").write_text('{"run_dir": "x", "tag": "step-00000003", "parameters": 1}')
    assert main(["predict", str(old), "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    assert "export.json: does not record the run's task and shards" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


def test_shards_with_other_graph_features_are_refused(trained, tmp_path, capsys):
    _, csv, _, _, export = trained
    plain = tmp_path / "plain"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(plain), "--no-progress", "--lap-k", "0", "--svd-rank", "4"]) == 0
    assert main(["predict", str(export), "--input", str(plain), "--out", str(tmp_path / "p.csv")]) == 2
    assert "are not the ones" in capsys.readouterr().err and not (tmp_path / "p.csv").exists()
    assert main(["predict", str(export), "--input", str(csv), "--smiles-column", "SMILES", "--out", str(tmp_path / "p.csv")]) == 2
    assert "missing column 'SMILES'" in capsys.readouterr().err


def test_an_export_of_several_targets_predicts_each_of_them(tmp_path):
    """The export's head has one output per target: before stop 24, `gtscale export` wrote the
    model YAML's num_outputs (1), so predict refused every multi-target export (the MOSES
    pretraining's ten descriptors) as not fitting its model."""
    csv = tpsa_csv(tmp_path / "tpsa.csv", rows=60)
    frame = pd.read_csv(csv)
    frame["tenth"] = frame["tpsa"] / 10
    frame.to_csv(csv, index=False)
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa,tenth", "--split-column", "split",
                 "--out", str(shards), "--no-progress", "--lap-k", "0", "--svd-rank", "4"]) == 0
    run_dir = train_tiny(shards, tmp_path / "run")
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["num_targets"] == 2
    assert main(["export", str(run_dir), "--out", str(tmp_path / "export")]) == 0
    assert yaml.safe_load((tmp_path / "export" / "model.yaml").read_text())["head"]["num_outputs"] == 2
    assert main(["predict", str(tmp_path / "export"), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    out = pd.read_csv(tmp_path / "p.csv")
    assert {"tpsa_pred", "tenth_pred"} <= set(out.columns) and out[["tpsa_pred", "tenth_pred"]].notna().all().all()
