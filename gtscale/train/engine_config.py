"""What DeepSpeed is given: the optimizer, precision and ZeRO settings, and the LR schedule."""

from __future__ import annotations

import math

import torch

from gtscale.train.config import TrainConfig


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """LR factor: linear warmup to 1, then cosine decay to `floor` (min_lr / lr) at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def deepspeed_config(cfg: TrainConfig, world_size: int, micro_batch: int) -> dict:
    ds = cfg.deepspeed
    zero: dict = {"stage": ds.zero_stage}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    out = {
        # With node-budget batching the graph count varies; DeepSpeed uses these numbers only for
        # its bookkeeping, the loss is a mean over each micro-batch's labelled targets.
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": ds.gradient_accumulation_steps,
        "train_batch_size": micro_batch * ds.gradient_accumulation_steps * world_size,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": cfg.optimizer.lr,
                "betas": list(cfg.optimizer.betas),
                "eps": cfg.optimizer.eps,
                "weight_decay": cfg.optimizer.weight_decay,
                # torch's AdamW unless offloading (then DeepSpeed's CPU Adam runs the step).
                "torch_adam": not ds.offload_optimizer,
            },
        },
        "zero_optimization": zero,
        "gradient_clipping": ds.gradient_clipping,
        "bf16": {"enabled": ds.precision == "bf16"},
        "fp16": {"enabled": ds.precision == "fp16", "loss_scale": 0},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    out.update(ds.extra)
    return out

