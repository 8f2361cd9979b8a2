"""Fine-tuning options as parameter groups with one LR lambda each (engine_config): a lower backbone
LR, layer-wise decay, and a backbone held still (LR 0) for the first N steps, also under ZeRO-2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.train.config import TrainConfig
from gtscale.train.engine_config import backbone_depths, group_lr_lambdas, param_groups, warmup_cosine

from launcher import REPO, free_port
from test_init_from import task_model


def config(**finetune) -> TrainConfig:
    return from_dict(TrainConfig, {"data": {"shards": "unused"}, "model": "egt-small", "optimizer": {"lr": 0.01},
                                   "schedule": {"total_steps": 100, "warmup_steps": 10}, "finetune": finetune})


def test_groups_cover_every_parameter_once_head_first_with_scaled_lrs():
    model = task_model(seed=0, outputs=1)  # EGT with 2 blocks
    groups = param_groups(model, config(backbone_lr_scale=0.1, layer_decay=0.5))
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters()) and len(ids) == len(set(ids))
    assert groups[0]["name"] == "head" and groups[0]["lr"] == 0.01 and not groups[0]["backbone"]
    lrs = {g["name"]: g["lr"] for g in groups}
    # depth 0 = embeddings, 1..2 = the blocks, 3 = final LayerNorm: 0.01 × 0.1 × 0.5^(3 − depth)
    assert lrs == pytest.approx({"head": 0.01, "backbone.depth0": 1.25e-4, "backbone.depth1": 2.5e-4, "backbone.depth2": 5e-4, "backbone.depth3": 1e-3})
    depths = backbone_depths(model.backbone)
    assert depths["node_embed.table.weight"] == 0 and depths["layers.1.qkv.weight"] == 2 and depths["final_ln_h.weight"] == 3


def test_defaults_give_every_group_the_plain_schedule():
    cfg = config()
    groups = param_groups(task_model(seed=0, outputs=1), cfg)
    assert {g["lr"] for g in groups} == {0.01}
    for f in group_lr_lambdas(cfg, groups):
        assert [f(s) for s in (0, 9, 50, 99)] == [warmup_cosine(s, 10, 100, 0.0) for s in (0, 9, 50, 99)]


def test_frozen_steps_zero_the_backbone_lambdas_only():
    cfg = config(freeze_backbone_steps=20)
    groups = param_groups(task_model(seed=0, outputs=1), cfg)
    lambdas = group_lr_lambdas(cfg, groups)
    for group, f in zip(groups, lambdas):
        assert [f(s) > 0 for s in (0, 19, 20, 50)] == ([False, False, True, True] if group["backbone"] else [True] * 4)
    assert lambdas[1](20) == warmup_cosine(20, 10, 100, 0.0)


@pytest.mark.parametrize("key,value,needle", [
    ("backbone_lr_scale", -0.1, "finetune.backbone_lr_scale: must be >= 0"),
    ("layer_decay", 0.0, "finetune.layer_decay: must be in (0, 1]"),
    ("layer_decay", 1.5, "finetune.layer_decay: must be in (0, 1]"),
    ("freeze_backbone_steps", 101, "finetune.freeze_backbone_steps: must be in 0..schedule.total_steps"),
])
def test_out_of_range_finetune_values_name_the_key(key, value, needle):
    """A field's own range as it is read; the steps frozen against schedule.total_steps across fields."""
    from gtscale.train.preflight import check_cross_fields

    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_cross_fields(config(**{key: value}))


def test_zero2_engine_keeps_the_backbone_still_while_frozen_then_trains_it():
    env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": ""}
    script = Path(__file__).with_name("finetune_engine.py")
    result = subprocess.run([sys.executable, str(script), "3", "5"], capture_output=True, text=True, env=env, timeout=240, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for r in rows[:3]:  # frozen: bit-identical backbone (ZeRO-2's fp32 partitions copied back), the head moves
        assert r["backbone_change"] == 0.0 and r["head_change"] > 0, r
        assert r["lrs"][0] > 0 and all(lr == 0.0 for lr in r["lrs"][1:]), r
    for r in rows[3:]:
        assert r["backbone_change"] > 0 and all(lr > 0 for lr in r["lrs"]), r
    assert rows[3]["lrs"][1] == pytest.approx(0.5 * rows[3]["lrs"][0])  # backbone_lr_scale
