"""`gtscale moleculeace-table` end to end on the smallest set: ECFP + SVR, the kernel SVR on a tiny
backbone, and a tiny EGT arm (2 seeds, 2 steps) with its ensemble and its blends with each SVR, in
one table whose cells are the arms' own sweep results; `gtscale predict` on the exports gives the
blends' predictions."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.experiments import moleculeace_table as mt
from gtscale.members.svr import SELECTION
from gtscale.sweep import ensemble_prediction, read_rows, write_sweep
from gtscale.format.manifest import load_manifest
from gtscale.format.record_meta import split_smiles
from export_fixtures import model_export
from gtscale.train.tasks import evaluate

SET = "CHEMBL2835_Ki"  # 615 molecules, the smallest bundled set


def tiny_config(path: Path) -> Path:
    """A 1-layer EGT; data.shards and run_dir are the table's to set."""
    path.write_text(yaml.safe_dump({
        "data": {"shards": "set-by-the-table", "loader": {"batching": "graphs", "batch_size": 32, "num_workers": 0}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1, "svd_rank": 0},
        "task": {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}},
        "optimizer": {"lr": 1e-3}, "schedule": {"total_steps": 2, "warmup_steps": 1},
        "checkpoint": {"every": 1000}, "eval": {"every": "epoch"}, "logging": {"every": 1, "tensorboard": False, "progress": False},
    }))
    return path


@pytest.mark.slow
def test_table_of_ecfp_and_a_trained_arm_with_its_ensemble_and_blends(tmp_path, capsys):
    out = tmp_path / "ace"
    backbone = model_export(tmp_path / "backbone")
    argv = ["moleculeace-table", "--out", str(out), "--sets", SET, "--arms", "ecfp", "kernel", "scratch", "ensemble", "blend", "blend-kernel",
            "--seeds", "0", "1", "--init-from", str(backbone), "--config", f"scratch={tiny_config(tmp_path / 'tiny.yaml')}",
            "--shard-args", "--lap-k 0 --svd-rank 0", "schedule.total_steps=2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table = json.loads((out / "table.json").read_text())
    ecfp_row = read_rows(out / SET / "ecfp")[0]
    seeds_row, ensemble_row = read_rows(out / SET / "scratch")
    cells = table["sets"][SET]
    kernel_row = read_rows(out / SET / "kernel")[0]
    for column, row in [("ecfp", ecfp_row), ("kernel", kernel_row), ("scratch", seeds_row), ("ensemble", ensemble_row)]:
        assert cells[column] == {m: row["summary"][m] for m in ("rmse", "cliff_rmse")}
        assert table["mean"][column] == {"rmse": row["summary"]["rmse"]["mean"], "cliff_rmse": row["summary"]["cliff_rmse"]["mean"], "sets": 1}
    assert seeds_row["summary"]["rmse"]["n"] == 2 and ensemble_row["ensemble_of"] == "scratch"
    assert printed == (out / "table.md").read_text()  # the runs' reports go to stderr
    lines = printed.splitlines()
    assert lines[2] == ("| set | ECFP4 + SVR | ECFP4 + gtscale kernel SVR | scratch | ensemble (scratch) | blend (ensemble of scratch + SVR)"
                        " | blend (ensemble of scratch + kernel SVR) |")
    assert lines[4].startswith(f"| {SET} | {ecfp_row['summary']['rmse']['mean']:.3f} / {ecfp_row['summary']['cliff_rmse']['mean']:.3f} |")
    assert lines[5].startswith("| **mean over 1 sets** |")
    ratio = seeds_row["summary"]["rmse"]["mean"] / ecfp_row["summary"]["rmse"]["mean"]
    kernel_ratio = kernel_row["summary"]["rmse"]["mean"] / ecfp_row["summary"]["rmse"]["mean"]
    ensemble_ratio = ensemble_row["summary"]["rmse"]["mean"] / ecfp_row["summary"]["rmse"]["mean"]
    assert lines[6].startswith(f"| mean RMSE ÷ ECFP4 + SVR's | 1.000 | {kernel_ratio:.3f} | {ratio:.3f} | {ensemble_ratio:.3f} |")

    # each blend: half the seeds' mean prediction, half its SVR's, matched by record idx
    idx, y_seeds, y_true = ensemble_prediction(seeds_row)
    blends = {}
    for blend, predictions in (("blend", out / SET / "ecfp" / "svr-test.npz"), ("blend-kernel", out / SET / "kernel" / "kernel-test.npz")):
        svr = np.load(predictions)
        svr_by_idx = dict(zip(svr["idx"].tolist(), svr["y_pred"][:, 0].tolist()))
        blends[blend] = 0.5 * y_seeds + 0.5 * np.array([[svr_by_idx[i]] for i in idx.tolist()])
        assert not np.allclose(blends[blend], y_seeds, atol=1e-3)  # the SVR moved it
        expected_rmse = evaluate(blends[blend], y_true, seeds_row_task(seeds_row))["rmse"]
        assert cells[blend]["rmse"]["mean"] == pytest.approx(expected_rmse, rel=1e-9)
        assert table["mean"][blend]["sets"] == 1 and "cliff_rmse" in cells[blend]
    y_blend = blends["blend"]

    # ... which `gtscale predict` gives from the seeds' best exports (where the sweep leaves them,
    # seed-S/export, as `gtscale export` would) and the SVR's, weighted 1 1 2
    shards = out / "shards" / SET
    test_idx, test_smiles = split_smiles(shards, load_manifest(shards), "test")
    csv = tmp_path / "test.csv"
    pd.DataFrame({"smiles": [test_smiles[i] for i in np.searchsorted(test_idx, idx)]}).to_csv(csv, index=False)
    exports = [str(out / SET / "scratch" / f"seed-{seed}" / "export") for seed in (0, 1)]
    for seed, export in zip((0, 1), exports):
        assert json.loads((Path(export) / "export.json").read_text())["tag"] == seeds_row["runs"][seed]["tag"]
    assert main(["predict", *exports, str(out / SET / "ecfp" / "export"), "--weights", "1", "1", "2", "--input", str(csv),
                 "--out", str(tmp_path / "blend.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "blend.csv")
    np.testing.assert_allclose(predicted.filter(like="_mean").iloc[:, 0], y_blend[:, 0], atol=1e-4)
    assert main(["predict", *exports, str(out / SET / "kernel" / "export"), "--weights", "1", "1", "2", "--input", str(csv),
                 "--out", str(tmp_path / "blend-kernel.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "blend-kernel.csv")
    np.testing.assert_allclose(predicted.filter(like="_mean").iloc[:, 0], blends["blend-kernel"][:, 0], atol=1e-4)
    capsys.readouterr()

    # a second call reads the finished arms instead of training again; --json prints table.json
    metrics_file = out / SET / "scratch" / "seed-0" / "metrics.jsonl"
    before = metrics_file.stat().st_mtime_ns, (out / SET / "scratch" / "sweep.json").stat().st_mtime_ns
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == table
    assert (metrics_file.stat().st_mtime_ns, (out / SET / "scratch" / "sweep.json").stat().st_mtime_ns) == before
    # an SVR fitted by another selection protocol (before svr.SELECTION: C on valid alone) is fitted again
    ecfp_json = out / SET / "ecfp" / "sweep.json"
    old = json.loads(ecfp_json.read_text())
    del old["rows"][0]["runs"][0]["chosen"]["selection"]
    ecfp_json.write_text(json.dumps(old))
    assert main(argv) == 0
    assert read_rows(out / SET / "ecfp")[0]["runs"][0]["chosen"]["selection"] == SELECTION
    assert (metrics_file.stat().st_mtime_ns, (out / SET / "scratch" / "sweep.json").stat().st_mtime_ns) == before
    capsys.readouterr()
    # blend-kernel reads the kernel arm's predictions (on this random backbone the kernel SVR may
    # choose ECFP alone, so its predictions are moved here to tell the two blends apart)
    kernel_npz = out / SET / "kernel" / "kernel-test.npz"
    moved = dict(np.load(kernel_npz))
    moved["y_pred"] = moved["y_pred"] + 1.0
    np.savez(kernel_npz, **moved)
    assert main([*argv, "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["sets"][SET]
    expected = evaluate(blends["blend-kernel"] + 0.5, y_true, seeds_row_task(seeds_row))["rmse"]
    assert cells["blend-kernel"]["rmse"]["mean"] == pytest.approx(expected, rel=1e-9)
    assert cells["blend"]["rmse"]["mean"] == table["sets"][SET]["blend"]["rmse"]["mean"]
    # other settings for the same folder are refused, not overwritten
    assert main([*argv[:-1], "schedule.total_steps=3"]) == 2
    assert "holds a sweep with other settings" in capsys.readouterr().err
    # a third seed extends the sweep: seeds 0 and 1 resume as finished, their metrics unchanged
    seeds_argv = argv.index("--seeds")
    assert main([*argv[:seeds_argv + 1], "0", "1", "2", *argv[seeds_argv + 3:]]) == 0
    extended, extended_ensemble = read_rows(out / SET / "scratch")
    assert [run["seed"] for run in extended["runs"]] == [0, 1, 2]
    assert extended["runs"][:2] == seeds_row["runs"] and extended_ensemble["runs"][0]["seeds"] == [0, 1, 2]
    assert (out / SET / "scratch" / "seed-2" / "export").is_dir()


@pytest.mark.slow
def test_resplit_gives_each_seed_its_own_validation_split_and_the_same_test_split(tmp_path, capsys):
    from gtscale.train.evaluate import run_config

    out = tmp_path / "ace"
    argv = ["moleculeace-table", "--out", str(out), "--sets", SET, "--arms", "scratch", "ensemble", "--seeds", "0", "1", "--resplit",
            "--config", f"scratch={tiny_config(tmp_path / 'tiny.yaml')}", "--shard-args", "--lap-k 0 --svd-rank 0"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("RMSE / cliff RMSE on each set's test split (trained arms: mean over seeds, each seed on its own")
    seeds_row, ensemble_row = read_rows(out / SET / "scratch")
    shards = [Path(run_config(Path(run["run_dir"])).data.shards) for run in seeds_row["runs"]]
    assert shards == [out / "shards" / SET, out / "shards" / f"{SET}-split1"]
    assert seeds_row["seed_overrides"] == {"1": [f"data.shards={shards[1]}"]}
    valid, test = ({i: split_smiles(s, load_manifest(s), split)[1] for i, s in enumerate(shards)} for split in ("valid", "test"))
    assert test[0] == test[1] and len(set(valid[0]) & set(valid[1])) < len(valid[0]) / 2
    table = json.loads((out / "table.json").read_text())
    assert table["resplit"] is True and table["sets"][SET]["ensemble"] == {m: ensemble_row["summary"][m] for m in ("rmse", "cliff_rmse")}
    # the same folder without --resplit is another arm: refused, nothing overwritten
    assert main([a for a in argv if a != "--resplit"]) == 2
    assert "holds a sweep with other settings" in capsys.readouterr().err
    assert read_rows(out / SET / "scratch")[0] == seeds_row


def seeds_row_task(row: dict):
    from gtscale.train.evaluate import run_config

    return run_config(Path(row["runs"][0]["run_dir"])).task


def trained(**values) -> dict:
    """mt.trained_arms of every arm, with `values` in place of the defaults."""
    return mt.trained_arms(**({"arms": list(mt.ALL_ARMS)} | values))


def test_the_features_arm_passes_its_shard_option_and_overrides_reach_their_arms():
    arms = trained(graph_features="morgan2048", init_from="pre.pt", arm_overrides=["scratch:optimizer.lr=0.01"], overrides=["seed=0"])
    assert arms["finetune-features"][0].shard_args == ("--graph-features", "morgan2048")
    assert arms["finetune"][0].shard_args == () and arms["finetune"][1] == ["seed=0", "init_from=pre.pt"]
    assert arms["scratch"][1] == ["seed=0", "optimizer.lr=0.01"]  # init_from only for the fine-tuned arms
    assert trained()["finetune-features"][0].shard_args == ("--graph-features", "morgan2048")
    assert list(trained(arms=["ecfp", "finetune"])) == ["finetune"]


@pytest.mark.parametrize("values, message", [
    ({"configs": ["nope=x.yaml"]}, "'nope' is not a trained arm"),
    ({"arm_overrides": ["scratch=1"]}, "--override: 'scratch=1' should look like ARM:…"),
    ({"configs": [f"scratch={os.devnull}.missing"]}, "--config scratch: "),
])
def test_bad_arm_options_are_one_line_errors(values, message):
    with pytest.raises(UserError, match=message):
        trained(**values)


def test_a_cached_sweep_is_read_extended_by_new_seeds_or_refused(tmp_path):
    folder = tmp_path / "arm"
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1]) is None  # nothing yet
    rows = [{"label": "arm", "config": "a.yaml", "overrides": ["x=1"], "runs": [{"seed": 0}, {"seed": 1}], "summary": {}}]
    write_sweep(folder, rows)
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1]) == rows
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1, 2]) is None  # the sweep trains seed 2
    for config, overrides, seeds in [("a.yaml", ["x=1"], [0]), ("a.yaml", ["x=1"], [1, 2]), ("b.yaml", ["x=1"], [0, 1, 2]),
                                     ("a.yaml", ["x=2"], [0, 1, 2])]:
        with pytest.raises(UserError, match="holds a sweep with other settings"):
            mt.cached_rows(folder, config, overrides, seeds)
    # a seed with overrides of its own (--resplit): the held seeds must match them, new seeds may add some
    own = {1: ["data.shards=s-split1"], 2: ["data.shards=s-split2"]}
    with pytest.raises(UserError, match="holds a sweep with other settings"):
        mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1, 2], own)  # seed 1 was trained on the common shards
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1, 2], {2: own[2]}) is None
    write_sweep(folder, [rows[0] | {"seed_overrides": {"1": own[1]}}])
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1], own)[0]["seed_overrides"] == {"1": own[1]}
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1, 2], own) is None
    with pytest.raises(UserError, match="holds a sweep with other settings"):
        mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1])
    # refitted seeds are other models than the validated ones: neither stands in for the other
    with pytest.raises(UserError, match="holds a sweep with other settings"):
        mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1], own, refit=True)
    write_sweep(folder, [rows[0] | {"refit": True}])
    assert mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1], refit=True)[0]["refit"] is True
    with pytest.raises(UserError, match="holds a sweep with other settings"):
        mt.cached_rows(folder, "a.yaml", ["x=1"], [0, 1])


def test_unknown_set_and_an_ensemble_without_its_arm_are_refused(tmp_path, capsys):
    assert main(["moleculeace-table", "--out", str(tmp_path / "o"), "--sets", "CHEMBL1_Ki"]) == 2
    assert "'CHEMBL1_Ki' is not a MoleculeACE set" in capsys.readouterr().err
    assert main(["moleculeace-table", "--out", str(tmp_path / "o"), "--sets", SET, "--arms", "ecfp", "ensemble"]) == 2
    assert "--arms ensemble: averages the seeds of a trained arm" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main(["moleculeace-table", "--out", str(tmp_path / "o"), "--sets", SET, "--arms", "scratch", "blend"]) == 2
    assert "--arms blend: averages the ensemble with ECFP4 + SVR; add ecfp" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main(["moleculeace-table", "--out", str(tmp_path / "o"), "--sets", SET, "--arms", "ecfp", "scratch", "blend-kernel"]) == 2
    assert "--arms blend-kernel: averages the ensemble with ECFP4 + gtscale kernel SVR; add kernel" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
