"""One rank of the frozen-backbone check (run by test_finetune_groups.py as a subprocess with
RANK/WORLD_SIZE/MASTER_* set): a DeepSpeed ZeRO-2 engine on CPU (gloo) built from
engine_config's parameter groups and per-group LR lambdas; prints the backbone's and the head's
change after each step as JSON lines."""

import json
import sys

import deepspeed
import torch
from torch import nn

from gtscale.config import from_dict
from gtscale.train.config import TrainConfig
from gtscale.train.engine_config import deepspeed_config, lr_scheduler, param_groups
from gtscale.train.trainer import join_process_group


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.final_ln = nn.LayerNorm(8)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.final_ln(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = Backbone(), nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


def main(frozen: int, steps: int) -> None:
    join_process_group()  # as the trainer joins it (gloo on the CPU)
    cfg = from_dict(TrainConfig, {
        "data": {"shards": "unused"}, "model": "egt-small", "optimizer": {"lr": 0.01, "weight_decay": 0.1},
        "schedule": {"total_steps": steps, "warmup_steps": 0}, "finetune": {"freeze_backbone_steps": frozen, "backbone_lr_scale": 0.5},
        "deepspeed": {"zero_stage": 2},
    })
    torch.manual_seed(0)
    model = Model()
    groups = param_groups(model, cfg)
    engine, _, _, scheduler = deepspeed.initialize(model=model, model_parameters=groups, lr_scheduler=lr_scheduler(cfg, groups),
                                                   config=deepspeed_config(cfg, world_size=1, micro_batch=8))
    before = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for step in range(steps):
        lrs = scheduler.get_last_lr()
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        engine.step()
        now = engine.module.state_dict()
        change = {part: sum(float((now[k] - before[k]).abs().sum()) for k in now if k.startswith(f"{part}.")) for part in ("backbone", "head")}
        print(json.dumps({"step": step, "lrs": lrs, "backbone_change": change["backbone"], "head_change": change["head"]}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
