"""A real seed sweep (2 seeds × 3 steps of a tiny EGT) and the ECFP baselines on the smallest
MoleculeACE set, compared in one table; the test metrics come from each run's best checkpoint."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gtscale.cli import main
from gtscale.prep.sources import moleculeace
from gtscale.format.manifest import load_manifest
from gtscale.train.evaluate import evaluate_run

SET = "CHEMBL2835_Ki"  # 615 molecules, the smallest bundled set


@pytest.fixture(scope="session")
def ace_shards(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ace")
    assert main(["shard", "moleculeace", "--dataset", SET, "--out", str(out), "--no-progress", "--lap-k", "0"]) == 0
    return out


def logged_rows(run_dir: Path, split: str) -> dict[int, dict]:
    """step → the metrics.jsonl row of `split` at that step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if r["split"] == split}


def tiny_config(path: Path, shards: Path, run_dir: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "run_dir": str(run_dir),
        "data": {"shards": str(shards), "loader": {"batching": "graphs", "batch_size": 32, "num_workers": 0}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1, "svd_rank": 0},
        "task": {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}},
        "optimizer": {"lr": 1e-3}, "schedule": {"total_steps": 3, "warmup_steps": 1},
        "checkpoint": {"every": 1000}, "eval": {"every": 0}, "logging": {"every": 1, "tensorboard": False, "progress": False},
    }))
    return path


@pytest.mark.slow
def test_sweep_scores_each_seed_best_checkpoint_on_test_and_compares_with_ecfp(ace_shards, tmp_path, capsys):
    config = tiny_config(tmp_path / "c.yaml", ace_shards, tmp_path / "egt")
    assert main(["sweep", str(config), "--seeds", "0", "1", "schedule.total_steps=3", "eval.every=1", "--label", "egt"]) == 0
    row, ensemble = json.loads((tmp_path / "egt" / "sweep.json").read_text())["rows"]
    test_samples = load_manifest(ace_shards)["splits"]["test"]["samples"]
    assert [r["seed"] for r in row["runs"]] == [0, 1] and row["overrides"] == ["schedule.total_steps=3", "eval.every=1"]
    for run in row["runs"]:
        # test is scored at the checkpoint of the best of the 3 validation RMSEs
        valid = {step: r["rmse"] for step, r in logged_rows(Path(run["run_dir"]), "valid").items()}
        best_step = min(valid, key=valid.get)
        assert sorted(valid) == [1, 2, 3] and run["tag"] == f"step-{best_step:08d}" and run["best_valid"] == valid[best_step]
        saved = json.loads((Path(run["run_dir"]) / "eval" / f"test-{run['tag']}.json").read_text())
        assert saved["samples"] == test_samples and saved["metrics"]["rmse"] == run["metrics"]["rmse"]
        resolved = yaml.safe_load((Path(run["run_dir"]) / "config.resolved.yaml").read_text())
        assert resolved["seed"] == resolved["data"]["loader"]["seed"] == run["seed"]  # init and data order
        train_stats = load_manifest(ace_shards)["task"]["target_stats"]["train"]  # task.target_* auto: the train split's
        assert resolved["task"]["target_shift"] == train_stats["mean"] and resolved["task"]["target_scale"] == train_stats["std"]
        assert 0 < run["metrics"]["cliff_rmse"] < 100
        # the separate evaluation step agrees with the trainer's own scoring of the same checkpoint
        assert evaluate_run(Path(run["run_dir"]), "valid")["metrics"]["rmse"] == pytest.approx(valid[best_step], rel=1e-5)
    rmses = [r["metrics"]["rmse"] for r in row["runs"]]
    assert rmses[0] != rmses[1]  # the seeds differ
    assert row["summary"]["rmse"]["mean"] == pytest.approx(np.mean(rmses)) and row["summary"]["rmse"]["std"] == pytest.approx(np.std(rmses, ddof=1))

    # the ensemble row: the seeds' mean test prediction, scored as one model
    saved = [np.load(Path(r["run_dir"]) / "eval" / f"test-{r['tag']}.npz") for r in row["runs"]]
    mean_pred, y_true = (saved[0]["y_pred"] + saved[1]["y_pred"]) / 2, saved[0]["y_true"]
    metrics = ensemble["runs"][0]["metrics"]
    assert ensemble["label"] == "egt, ensemble of 2" and ensemble["runs"][0]["seeds"] == [0, 1]
    assert metrics["rmse"] == pytest.approx(float(np.sqrt(np.mean((mean_pred - y_true) ** 2))), rel=1e-6)
    assert metrics["cliff_rmse"] == pytest.approx(moleculeace.cliff_rmse(ace_shards, "test", saved[0]["idx"], mean_pred, y_true), rel=1e-6)
    assert metrics["rmse"] <= max(rmses) and ensemble["summary"]["rmse"] == {"mean": metrics["rmse"], "std": 0.0, "n": 1}

    assert main(["baseline", "ecfp", str(ace_shards), "--out", str(tmp_path / "ecfp"), "--seeds", "0", "--trees", "10"]) == 0
    baseline = json.loads((tmp_path / "ecfp" / "sweep.json").read_text())["rows"]
    assert [r["label"] for r in baseline] == ["ECFP4 + SVR", "ECFP4 + RF"]
    assert all(0 < r["summary"][m]["mean"] < 5 for r in baseline for m in ("rmse", "cliff_rmse", "mae"))
    capsys.readouterr()
    assert main(["sweep", "--compare", str(tmp_path / "egt"), str(tmp_path / "ecfp")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| run | rmse | cliff_rmse | mae |"
    assert [line.split(" |")[0] for line in table[2:]] == ["| egt", "| egt, ensemble of 2", "| ECFP4 + SVR", "| ECFP4 + RF"]


@pytest.mark.slow
def test_a_refit_trains_on_train_and_valid_for_the_step_chosen_on_valid(ace_shards, tmp_path):
    from gtscale.format.target_stats import recorded_stats

    config = tiny_config(tmp_path / "c.yaml", ace_shards, tmp_path / "egt")
    assert main(["sweep", str(config), "--seeds", "0", "schedule.total_steps=5", "eval.every=1", "--refit"]) == 0
    row = json.loads((tmp_path / "egt" / "sweep.json").read_text())["rows"][0]
    (run,) = row["runs"]
    validated, refit = tmp_path / "egt" / "seed-0", tmp_path / "egt" / "seed-0-refit"
    valid = {step: r["rmse"] for step, r in logged_rows(validated, "valid").items()}
    best = min(valid, key=valid.get)
    assert row["refit"] is True and run["run_dir"] == str(refit) and run["validated"]["run_dir"] == str(validated)
    assert run["validated"]["tag"] == f"step-{best:08d}" and run["validated"]["metrics"]["rmse"] != run["metrics"]["rmse"]
    assert run["refit_step"] == best and run["best_valid"] == valid[best]
    resolved = yaml.safe_load((refit / "config.resolved.yaml").read_text())
    assert resolved["data"]["train_split"] == "train+valid" and resolved["max_steps"] == best and resolved["schedule"]["total_steps"] == 5
    pooled = recorded_stats(load_manifest(ace_shards), "train+valid")  # standardised by both splits' targets
    assert resolved["task"]["target_shift"] == pooled["mean"] and resolved["task"]["target_scale"] == pooled["std"]
    # it stops at the chosen step, its learning rate on the validated run's curve, and is scored there
    trained = logged_rows(refit, "train")
    assert max(trained) == best and all(trained[s]["lr"] == logged_rows(validated, "train")[s]["lr"] for s in trained)
    assert run["tag"] == f"step-{best:08d}" and Path(run["export"]).parent == refit
    saved = json.loads((refit / "eval" / f"test-{run['tag']}.json").read_text())
    assert saved["metrics"]["rmse"] == run["metrics"]["rmse"] and row["summary"]["rmse"]["mean"] == run["metrics"]["rmse"]


def test_evaluate_refuses_a_folder_that_is_no_run(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--split", "test"]) == 2
    assert "not a run directory (no config.yaml)" in capsys.readouterr().err


def test_the_cliff_rmse_needs_only_the_shards(tmp_path):
    """The cliff flags come from the records' names: the cliff RMSE is computed after the source CSV
    is gone, over exactly the rows its cliff_mol column marks."""
    import pandas as pd

    from gtscale.prep.sources.moleculeace import data_folder

    root = tmp_path / "csvs"
    root.mkdir()
    (root / f"{SET}.csv").write_bytes((data_folder() / f"{SET}.csv").read_bytes())
    source = pd.read_csv(root / f"{SET}.csv")
    shards = tmp_path / "shards"
    assert main(["shard", "moleculeace", "--dataset", SET, "--root", str(root), "--out", str(shards), "--no-progress",
                 "--lap-k", "0", "--svd-rank", "0"]) == 0
    (root / f"{SET}.csv").unlink()
    idx = np.flatnonzero(source["split"].to_numpy() == "test")
    y_true = source["y"].to_numpy()[idx, None]
    y_pred = y_true + np.where(source["cliff_mol"].to_numpy()[idx, None] == 1, 0.5, 2.0)  # off by 0.5 on cliffs, 2 elsewhere
    assert moleculeace.cliff_rmse(shards, "test", idx[::-1], y_pred[::-1], y_true[::-1]) == pytest.approx(0.5)
