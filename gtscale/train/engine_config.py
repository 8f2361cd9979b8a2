"""What DeepSpeed is given: the optimizer, precision and ZeRO settings, and the LR schedule."""

from __future__ import annotations

import math

import torch

from gtscale.errors import UserError
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
    return merge_extra(out, ds.extra)


def merge_extra(generated: dict, extra: dict, prefix: str = "deepspeed.extra") -> dict:
    """`generated` with deepspeed.extra merged in deeply: a mapping in extra adds to gtscale's
    mapping of the same key (extra.zero_optimization.reduce_bucket_size keeps zero_optimization.stage),
    and a value gtscale sets itself is refused, naming the config key that sets it, since replacing
    it would disagree with what the trainer does (train_batch_size is micro-batch × accumulation ×
    ranks; the loss weighting relies on it)."""
    out = dict(generated)
    for key, value in extra.items():
        path = f"{prefix}.{key}"
        if key not in out or key in _EXTRA_MAY_REPLACE:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = merge_extra(out[key], value, path)
        else:
            raise UserError(f"{path}: set by gtscale itself ({_SET_BY.get(key, 'from the deepspeed, optimizer and data.loader sections')}); remove it from deepspeed.extra")
    return out


#: Keys gtscale fills with a default that training does not depend on: deepspeed.extra may replace them.
_EXTRA_MAY_REPLACE = {"steps_per_print", "wall_clock_breakdown", "loss_scale", "pin_memory", "torch_adam"}
#: Where the DeepSpeed keys gtscale fills come from, for the refusal of an extra that replaces one.
_SET_BY = {
    "train_micro_batch_size_per_gpu": "data.loader.batch_size",
    "gradient_accumulation_steps": "deepspeed.gradient_accumulation_steps",
    "train_batch_size": "data.loader.batch_size × deepspeed.gradient_accumulation_steps × ranks",
    "stage": "deepspeed.zero_stage",
    "gradient_clipping": "deepspeed.gradient_clipping",
    "enabled": "deepspeed.precision",
    "lr": "optimizer.lr", "betas": "optimizer.betas", "eps": "optimizer.eps", "weight_decay": "optimizer.weight_decay",
}


def check_with_deepspeed(config: dict) -> None:
    """DeepSpeed's own reading of the config, its refusals (an AssertionError or a pydantic error
    deep inside deepspeed.initialize) turned into one line. Every rank builds the same config, so
    every rank refuses alike, before the engine exists."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from pydantic import ValidationError

    try:
        DeepSpeedConfig(config)
    except ValidationError as err:  # pydantic's first line only names the model; the field is in errors()
        first = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()[:2])
        raise UserError(f"deepspeed.extra: DeepSpeed refuses the resulting config: {err.title} {first}") from None
    except (AssertionError, ValueError, TypeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"deepspeed.extra: DeepSpeed refuses the resulting config: {first}") from None



# --- fine-tuning: parameter groups and one LR factor per group ------------------------------------
def backbone_depths(backbone: torch.nn.Module) -> dict[str, int]:
    """Depth of each backbone parameter for layer-wise LR decay: 0 for what comes before the blocks
    (embeddings, virtual nodes, the graph token), i + 1 for block `layers.i`, L + 1 after them (the
    final LayerNorm). "Before" and "after" follow registration order, which is the order the
    models (EGT, Graphormer) build and apply their parts in."""
    names = [name for name, _ in backbone.named_parameters()]
    blocks = [int(name.split(".")[1]) for name in names if name.startswith("layers.")]
    num_layers = max(blocks) + 1 if blocks else 0
    depths, seen_block = {}, False
    for name in names:
        if name.startswith("layers."):
            depths[name], seen_block = int(name.split(".")[1]) + 1, True
        else:
            depths[name] = num_layers + 1 if seen_block else 0
    return depths


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """The optimizer's parameter groups, task head first (so that group 0's LR is the one logged):
    the head (and EGT's distance head) at optimizer.lr, the backbone at
    optimizer.lr × finetune.backbone_lr_scale × finetune.layer_decay^(L + 1 − depth), one group
    per depth. Each group carries its own `lr` (torch and DeepSpeed's ZeRO optimizers keep per-group
    values), `name`, and `backbone` (whether finetune.freeze_backbone_steps holds it still)."""
    ft = cfg.finetune
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    head = [p for name, p in trainable.items() if not name.startswith("backbone.")]
    groups = [{"params": head, "lr": cfg.optimizer.lr, "name": "head", "backbone": False}] if head else []
    depths = backbone_depths(model.backbone)
    top = max(depths.values(), default=0)
    for depth in sorted(set(depths.values())):
        params = [trainable[f"backbone.{n}"] for n, d in depths.items() if d == depth and f"backbone.{n}" in trainable]
        if params:
            scale = ft.backbone_lr_scale * ft.layer_decay ** (top - depth)
            groups.append({"params": params, "lr": cfg.optimizer.lr * scale, "name": f"backbone.depth{depth}", "backbone": True})
    return groups


def group_lr_lambdas(cfg: TrainConfig, groups: list[dict]) -> list:
    """One LR factor per group, for torch's LambdaLR (which multiplies each group's own `lr`):
    warmup + cosine for every group, and 0 for backbone groups during the first
    finetune.freeze_backbone_steps optimizer steps.

    Freezing is a zero LR, not requires_grad=False: ZeRO flattens every group's parameters into
    partitions when the engine is built, so toggling requires_grad later does not stop their
    update. With LR 0, AdamW changes no weight (its decoupled weight decay is lr × wd too); the
    backbone's gradients are still computed, fill Adam's moments and count in gradient clipping's
    global norm."""
    floor = cfg.schedule.min_lr / cfg.optimizer.lr if cfg.optimizer.lr > 0 else 0.0
    warmup, total, frozen = cfg.schedule.warmup_steps, cfg.schedule.total_steps, cfg.finetune.freeze_backbone_steps

    def schedule(step: int) -> float:
        return warmup_cosine(step, warmup, total, floor)

    def backbone(step: int) -> float:
        return 0.0 if step < frozen else warmup_cosine(step, warmup, total, floor)

    return [backbone if group["backbone"] else schedule for group in groups]


def lr_scheduler(cfg: TrainConfig, groups: list[dict]):
    """What deepspeed.initialize takes as lr_scheduler: a callable that builds a LambdaLR with one
    lambda per parameter group on the optimizer DeepSpeed creates from `groups`."""
    lambdas = group_lr_lambdas(cfg, groups)
    return lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
