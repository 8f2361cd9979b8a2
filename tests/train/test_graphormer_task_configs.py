"""The Graphormer task configs parse into typed configs with the paper's settings (the shard
folders they name do not exist here, so the manifest checks of load_train_config are left out)."""

from __future__ import annotations

import pytest

from gtscale.config import CONFIG_ROOT, from_dict, load_yaml
from gtscale.models import parse_model_config
from gtscale.train.config import TrainConfig, check_task, resolve_model_config


@pytest.mark.parametrize("name, metric, lr, steps, targets", [
    ("pcqm4mv2-graphormer", "mae", 2e-4, 1_000_000, 1),
    ("molhiv-graphormer", "rocauc", 2e-4, 2062, 1),
    ("molpcba-graphormer", "ap", 3e-4, 13685, 128),
])
def test_graphormer_task_configs_parse(name, metric, lr, steps, targets):
    cfg = from_dict(TrainConfig, load_yaml(CONFIG_ROOT / "tasks" / f"{name}.yaml"))
    model = parse_model_config(resolve_model_config(cfg))
    check_task(cfg.task, targets)  # the datasets' target counts
    assert (model.hidden_dim, model.num_layers, model.num_heads) == (768, 12, 32)
    assert (cfg.task.metric, cfg.optimizer.lr, cfg.schedule.total_steps) == (metric, lr, steps)
    assert cfg.deepspeed.gradient_clipping == 5.0
    assert (cfg.init_from is None) == (name == "pcqm4mv2-graphormer")
