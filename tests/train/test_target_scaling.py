"""Regression targets are standardised with the train split's statistics, which the sharder records
in the manifest; explicit task.target_shift / target_scale win."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import RDConfig

from gtscale.cli import main
from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.train.config import TaskConfig
from gtscale.train.preflight import load_train_config
from gtscale.train.target_scaling import resolve_target_scaling
from gtscale.train.tasks import predictions, task_loss

from launcher import write_config


def test_sharder_records_each_splits_target_mean_and_std(tmp_path):
    smiles = [line.split()[0] for line in (Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi").read_text().splitlines()[:12]]
    rng = np.random.default_rng(0)
    y = rng.normal(5.0, 2.0, size=(12, 2))
    y[3, 1] = np.nan  # unlabelled
    y[4, 0] = np.inf  # a bad value: not counted either
    split = ["train"] * 8 + ["valid"] * 4
    with open(tmp_path / "m.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["smiles", "a", "b", "split"])
        writer.writerows([s, a, "" if np.isnan(b) else b, sp] for s, (a, b), sp in zip(smiles, y, split))
    assert main(["shard", "smiles-csv", "--input", str(tmp_path / "m.csv"), "--target-columns", "a,b", "--split-column", "split",
                 "--out", str(tmp_path / "s"), "--no-progress", "--lap-k", "0", "--svd-rank", "0"]) == 0
    stats = load_manifest(tmp_path / "s")["task"]["target_stats"]
    train = y[:8].astype(np.float32).astype(np.float64)
    for t in range(2):
        column = train[np.isfinite(train[:, t]), t]
        assert stats["train"]["count"][t] == len(column) == 7
        assert stats["train"]["mean"][t] == pytest.approx(column.mean()) and stats["train"]["std"][t] == pytest.approx(column.std())
    assert stats["valid"]["count"] == [4, 4]


MANIFEST = {"_dir": "shards/x", "task": {"target_stats": {"train": {"count": [10, 0, 10], "mean": [-1.5, None, 3.0], "std": [2.0, None, 0.0]}}}}


def task(**values) -> TaskConfig:
    return from_dict(TaskConfig, {"loss": "mse", "metric": "rmse", "evaluator": "regression", **values})


def test_auto_is_the_train_statistics_and_a_given_value_wins():
    assert task().target_shift == "auto" == task().target_scale  # the default
    # a target without train labels keeps shift 0, one without spread scale 1
    assert resolve_target_scaling(task(), MANIFEST, "train", 3) == ([-1.5, 0.0, 3.0], [2.0, 1.0, 1.0])
    assert resolve_target_scaling(task(target_shift=0.5), MANIFEST, "train", 3) == (0.5, [2.0, 1.0, 1.0])
    assert resolve_target_scaling(task(target_shift=0.5, target_scale=[1, 2, 3]), {}, "train", 3) == (0.5, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("values, manifest, message", [
    ({}, {"_dir": "old"}, "auto needs the train split's target statistics (task.target_stats.train) in old's manifest"),
    ({"target_scale": "auto"}, {"task": {"target_stats": {"valid": {}}}}, "auto needs the train split's target statistics"),
    ({"target_shift": [1.0, 2.0], "target_scale": 1.0}, MANIFEST, "task.target_shift: 2 values for the 3 target(s) of shards/x"),
])
def test_refused(values, manifest, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_target_scaling(task(**values), manifest, "train", 3)


def test_per_target_values_standardise_each_column_and_predictions_undo_it():
    cfg = task(target_shift=[1.0, -2.0], target_scale=[2.0, 4.0])
    y = torch.tensor([[3.0, 2.0], [1.0, -6.0]])
    scores = torch.tensor([[1.0, 1.0], [0.0, -1.0]])
    mask = torch.tensor([[True, True], [True, False]])
    z = (y - torch.tensor([1.0, -2.0])) / torch.tensor([2.0, 4.0])
    assert task_loss(scores, y, mask, cfg).item() == pytest.approx(((scores - z) ** 2)[mask].mean().item())
    assert torch.allclose(predictions(z, cfg), y)


def test_train_refuses_auto_on_shards_without_statistics(nci_shards_copy, tmp_path, capsys):
    manifest = json.loads((nci_shards_copy / "manifest.json").read_text())
    del manifest["task"]["target_stats"]  # as shards written before gtscale recorded them
    (nci_shards_copy / "manifest.json").write_text(json.dumps(manifest))
    cfg = write_config(tmp_path / "c.yaml", nci_shards_copy, tmp_path / "run", task={"target_shift": "auto", "evaluator": "regression"})
    assert main(["train", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "auto needs the train split's target statistics" in err and not (tmp_path / "run").exists()
    # numbers need no statistics (write_config's task gives target_scale 40)
    assert load_train_config(cfg, ["task.target_shift=60"]).task.target_shift == 60.0
