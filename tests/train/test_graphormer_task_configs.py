"""The Graphormer task configs parse into typed configs with the paper's settings (the shard
folders they name do not exist here, so the manifest checks of load_train_config are left out)."""

from __future__ import annotations

import pytest

from gtscale.config import CONFIG_ROOT, from_dict, load_yaml
from gtscale.models import parse_model_config
from gtscale.train.config import TrainConfig, resolve_model_config
from gtscale.train.preflight import check_task


@pytest.mark.parametrize("name, metric, lr, steps, warmup, targets, clip, dropouts", [
    # examples/property_prediction/pcqv2.sh (fairseq)
    ("pcqm4mv2-graphormer", "mae", 2e-4, 1_000_000, 60_000, 1, 5.0, (0.0, 0.1, 0.1)),
    # branch v1.0 examples/ogb/hiv.sh: 33000·8/128 updates, a tenth warmup, no clipping
    ("molhiv-graphormer", "rocauc", 2e-4, 2062, 206, 1, 0.0, (0.1, 0.1, 0.0)),
    # branch v1.0 examples/ogb/pcba.sh: 350000·10/64/4 updates, a sixteenth warmup, no clipping
    ("molpcba-graphormer", "ap", 3e-4, 13671, 854, 128, 0.0, (0.1, 0.3, 0.0)),
])
def test_graphormer_task_configs_parse(name, metric, lr, steps, warmup, targets, clip, dropouts):
    cfg = from_dict(TrainConfig, load_yaml(CONFIG_ROOT / "tasks" / f"{name}.yaml"))
    model = parse_model_config(resolve_model_config(cfg))
    check_task(cfg.task, targets)  # the datasets' target counts
    assert (model.node_width, model.num_layers, model.num_heads) == (768, 12, 32)
    assert (model.dropout, model.attention_dropout, model.activation_dropout) == dropouts
    assert (cfg.task.metric, cfg.optimizer.lr, cfg.schedule.total_steps, cfg.schedule.warmup_steps) == (metric, lr, steps, warmup)
    assert cfg.deepspeed.gradient_clipping == clip
    assert (cfg.init_from is None) == (name == "pcqm4mv2-graphormer")
