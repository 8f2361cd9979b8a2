"""Every config value a run cannot use is refused with the rest of the config, before any process
group starts: ranges (declared on the fields of config.py), constraints between fields
(preflight.check_cross_fields), the head the model must carry, the evaluator the shards'
targets must fit, and the loader fields the model chooses."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from launcher import REPO, write_config


def refusal(tpsa_shards, tmp_path, *overrides, **sections) -> str:
    from gtscale.errors import UserError
    from gtscale.train.preflight import load_train_config

    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", **sections)
    with pytest.raises(UserError) as err:
        load_train_config(cfg, list(overrides))
    return str(err.value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("checkpoint.every=0", "checkpoint.every: must be >= 1, got 0"),
        ("checkpoint.every=-5", "checkpoint.every: must be >= 1, got -5"),
        ("logging.every=0", "logging.every: must be >= 1, got 0"),
        ("eval.every=-1", "eval.every: must be >= 0 (0 = only at the end, or epoch), got -1"),
        ("eval.every=often", "eval.every: 'often' is not one of 'epoch'"),
        ("eval.patience=-1", "eval.patience: must be >= 0 (0 = never stop early), got -1"),
        ("checkpoint.keep=-1", "checkpoint.keep: must be >= 0"),
        ("optimizer.lr=-0.001", "optimizer.lr: must be >= 0, got -0.001"),
        ("optimizer.lr=.inf", "optimizer.lr: must be >= 0, got inf"),
        ("optimizer.lr=.nan", "optimizer.lr: must be >= 0, got nan"),
        ("optimizer.betas=[0.9,1.0]", "optimizer.betas: must be 2 values, each in [0, 1), got [0.9, 1.0]"),
        ("optimizer.betas=[-0.1,0.9]", "optimizer.betas: must be 2 values, each in [0, 1)"),
        ("optimizer.betas=[0.9]", "optimizer.betas: must be 2 values, each in [0, 1), got [0.9]"),
        ("optimizer.eps=0", "optimizer.eps: must be > 0, got 0.0"),
        ("optimizer.weight_decay=-0.01", "optimizer.weight_decay: must be >= 0"),
        ("schedule.min_lr=-0.00001", "schedule.min_lr: must be in [0, optimizer.lr]"),
        ("schedule.min_lr=0.01", "schedule.min_lr: must be in [0, optimizer.lr], got 0.01"),
        ("schedule.warmup_steps=21", "schedule.warmup_steps: must be in 0..schedule.total_steps, got 21"),
        ("schedule.warmup_steps=-1", "schedule.warmup_steps: must be in 0..schedule.total_steps"),
        ("schedule.total_steps=0", "schedule.total_steps: must be >= 1"),
        ("deepspeed.gradient_accumulation_steps=0", "deepspeed.gradient_accumulation_steps: must be >= 1, got 0"),
        ("deepspeed.gradient_clipping=-1", "deepspeed.gradient_clipping: must be >= 0"),
        ("deepspeed.zero_stage=4", "deepspeed.zero_stage: must be in 0..3, got 4"),
        ("task.target_scale=0", "task.target_scale: must be > 0"),
        ("task.target_shift=.nan", "task.target_shift: must be finite"),
        ("seed=-1", "seed: must be in 0..2147483647 (numpy seeds seed + rank), got -1"),
        ("data.loader.seed=-3", "data.loader.seed: must be >= 0, got -3"),
        ("max_nonfinite=0", "max_nonfinite: must be >= 1"),
        ("max_steps=0", "max_steps: must be >= 1"),
        ("data.loader.num_workers=-1", "data.loader.num_workers: must be >= 0, got -1"),
        ("data.loader.bucket_ratio=1.0", "data.loader.bucket_ratio: must be > 1, got 1.0"),
        ("data.loader.prefetch_factor=0", "data.loader.prefetch_factor: must be >= 1, got 0"),
        ("data.loader.bucket_boundaries=[0,8]", "data.loader.bucket_boundaries: must be >= 1 (each value), got [0, 8]"),
    ],
)
def test_out_of_range_values_name_the_dotted_key(tpsa_shards, tmp_path, override, message):
    assert message in refusal(tpsa_shards, tmp_path, override)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["finetune.freeze_backbone_steps=21"], "finetune.freeze_backbone_steps: must be in 0..schedule.total_steps, got 21"),
        (["compile.enabled=true", "deepspeed.zero_stage=3"], "compile.enabled: must be false with deepspeed.zero_stage 3"),
        (["compile.mode=reduce-overhead"], "compile.mode: must be not reduce-overhead (CUDA graphs) without data.loader.pad_to_bucket: true"),
    ],
)
def test_constraints_across_sections_name_the_dotted_key(tpsa_shards, tmp_path, overrides, message):
    assert message in refusal(tpsa_shards, tmp_path, *overrides)


def test_a_config_copied_in_code_meets_the_same_ranges(tpsa_shards, tmp_path):
    """dataclasses.replace runs __post_init__: a copy with a value out of range is refused, naming the key."""
    import dataclasses

    from gtscale.errors import UserError
    from gtscale.train.preflight import load_train_config

    cfg = load_train_config(write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run"), [])
    with pytest.raises(UserError, match=r"^optimizer\.eps: must be > 0, got 0\.0$"):
        dataclasses.replace(cfg, optimizer=dataclasses.replace(cfg.optimizer, eps=0.0))


def test_aux_distance_ranges_and_edges(tpsa_shards, tmp_path):
    edges = {"num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "num_virtual_nodes": 1, "output_edges": True}
    assert "task.aux_distance.max_hops: must be >= 1" in refusal(tpsa_shards, tmp_path, model_overrides=edges, task={"aux_distance": {"max_hops": 0}})
    assert "task.aux_distance.weight: must be >= 0" in refusal(tpsa_shards, tmp_path, model_overrides=edges, task={"aux_distance": {"weight": -1.0}})
    # Without output_edges the distance head has nothing to read: refused before the model is built for real.
    assert refusal(tpsa_shards, tmp_path, task={"aux_distance": {"max_hops": 4}}).startswith("task.aux_distance: a distance head needs edge outputs")


@pytest.mark.parametrize(
    "head,message",
    [
        ({"kind": "edge"}, "task.head.kind: a edge head needs edge outputs"),
        ({"kind": "pairs"}, "task.head.kind: 'pairs' is not one of"),
        ({"hidden": [0]}, "task.head.hidden: must be in 1..65536 (each value), got [0]"),
        ({"widths": [32]}, "task.head.widths: unknown key"),
        ({"activation": "tanh"}, "task.head.activation: 'tanh' is not one of"),
        ({"num_outputs": 3}, "task.head.num_outputs: set by the shards' number of targets (1 in"),
    ],
)
def test_task_head_is_checked_with_the_config(tpsa_shards, tmp_path, head, message):
    assert message in refusal(tpsa_shards, tmp_path, task={"head": head})


def test_head_check_builds_nothing_for_real(tpsa_shards, tmp_path):
    """The head check builds the model on the meta device: no parameter memory, however large."""
    import torch

    from gtscale.format.manifest import load_manifest
    from gtscale.train.preflight import load_train_config
    from gtscale.train.resolve import resolve_config
    from gtscale.train.task_model import build_task_model

    cfg = load_train_config(write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", model="egt-larger"), ["model_overrides={}"])
    resolved = resolve_config(cfg, load_manifest(tpsa_shards))
    with torch.device("meta"):
        model = build_task_model(resolved)
    assert sum(p.numel() for p in model.parameters()) > 50_000_000
    assert all(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("key,value", [("keys", ["spd", "y"]), ("path_edges_max_dist", 3)])
def test_loader_fields_the_model_chooses_are_refused(tpsa_shards, tmp_path, key, value):
    """The trainer sets these from the model's batch_fields; a YAML value was silently replaced."""
    message = refusal(tpsa_shards, tmp_path, data={"loader": {key: value}})
    assert message.startswith(f"data.loader.{key}: set by the model") and "remove it" in message


def two_target_shards(tpsa_shards, tmp_path):
    """The TPSA shards' manifest, claiming two targets (the config check reads only the manifest)."""
    out = tmp_path / "two"
    out.mkdir()
    manifest = json.loads((tpsa_shards / "manifest.json").read_text())
    manifest["task"]["num_targets"] = 2
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_pcqm4mv2_evaluator_refuses_several_targets(tpsa_shards, tmp_path):
    message = refusal(two_target_shards(tpsa_shards, tmp_path), tmp_path)
    assert message.startswith("task.evaluator: 'pcqm4mv2' scores 1 target(s) but") and "has 2" in message


def test_ogb_evaluator_must_fit_the_target_count(tpsa_shards, tmp_path):
    """ogbg-molpcba scores 128 tasks; on 1-target shards OGB raised inside evaluate and the run got no metric."""
    message = refusal(tpsa_shards, tmp_path, task={"loss": "bce", "metric": "ap", "evaluator": "ogbg-molpcba"})
    assert message.startswith("task.evaluator: 'ogbg-molpcba' scores 128 target(s)") and "has 1" in message


def test_rmse_metric_is_accepted_and_paired_with_a_regression_loss(tpsa_shards, tmp_path):
    from gtscale.train.preflight import load_train_config

    for evaluator in ("pcqm4mv2", "ogbg-molesol", "ogbg-mollipo", "ogbg-molfreesolv"):
        cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", task={"metric": "rmse", "evaluator": evaluator})
        loaded = load_train_config(cfg, [])
        assert loaded.task.metric == "rmse" and not loaded.task.higher_is_better
    assert "task.loss: 'bce' does not suit metric 'rmse'" in refusal(tpsa_shards, tmp_path, task={"metric": "rmse", "loss": "bce", "evaluator": "ogbg-molesol"})
    assert "task.metric: 'rmse' is not reported by evaluator 'ogbg-molhiv'" in refusal(tpsa_shards, tmp_path, task={"metric": "rmse", "evaluator": "ogbg-molhiv"})


def test_rmse_and_mae_from_the_gathered_predictions():
    from gtscale.train.config import TaskConfig
    from gtscale.train.tasks import evaluate

    y_true = np.array([[1.0], [2.0], [np.nan], [4.0]])
    y_pred = np.array([[1.5], [2.0], [9.0], [2.0]])
    got = evaluate(y_pred, y_true, TaskConfig(metric="rmse"))
    assert got["mae"] == pytest.approx(2.5 / 3) and got["rmse"] == pytest.approx(math.sqrt((0.25 + 4.0) / 3))
    esol = evaluate(y_pred, y_true, TaskConfig(metric="rmse", evaluator="ogbg-molesol"))  # OGB's own rmse
    assert esol == {"rmse": pytest.approx(got["rmse"])}
    with pytest.raises(ValueError, match="scores one target"):  # never column 0 of two, silently
        evaluate(np.hstack([y_pred, y_pred]), np.hstack([y_true, y_true]), TaskConfig())


def test_cli_refuses_before_any_process_group(tpsa_shards, tmp_path):
    """One line, exit 2, no run directory: under the launcher's environment, so a process group
    would have been started had the check come later."""
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run")
    for override, needle in (("checkpoint.every=0", "checkpoint.every: must be >= 1"), ("task.head.kind=edge", "task.head.kind:")):
        result = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(cfg), override], capture_output=True, text=True, cwd=REPO, timeout=120)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], result.stderr
        assert not (tmp_path / "run").exists()
