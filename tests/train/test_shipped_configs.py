"""Every shipped task config parses into typed configs, its model builds on the meta device, and
its task section passes the checks that need no shards (the shard folders do not exist here)."""

from __future__ import annotations

import pytest
import torch

from gtscale.config import CONFIG_ROOT, from_dict, load_yaml
from gtscale.models import build_model, parse_model_config
from gtscale.train.config import DEEPSPEED_PRESETS, TrainConfig, resolve_model_config

TASKS = sorted(p.stem for p in (CONFIG_ROOT / "tasks").glob("*.yaml"))


@pytest.mark.parametrize("name", TASKS)
def test_task_config_parses_and_its_model_builds(name):
    raw = load_yaml(CONFIG_ROOT / "tasks" / f"{name}.yaml")
    if isinstance(raw.get("deepspeed"), str):  # a preset name, as load_train_config resolves it
        raw["deepspeed"] = load_yaml(DEEPSPEED_PRESETS / f"{raw['deepspeed']}.yaml")
    cfg = from_dict(TrainConfig, raw)
    model_cfg = resolve_model_config(cfg)
    parse_model_config(model_cfg)
    with torch.device("meta"):
        model = build_model(model_cfg)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_every_model_preset_parses():
    for path in sorted((CONFIG_ROOT / "models").glob("*.yaml")):
        parse_model_config(load_yaml(path))
