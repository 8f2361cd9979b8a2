"""The training job's configuration: one YAML, typed sections, validated before any process starts.

    gtscale train configs/tasks/nci-tpsa.yaml deepspeed.zero_stage=3 schedule.total_steps=2000

Unknown keys, wrong types and missing shard directories are reported as one line naming the key or
path (exit status 2). The resolved configuration is saved as `config.yaml` in the run directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from gtscale.config import CONFIG_ROOT, apply_overrides, from_dict, load_yaml
from gtscale.loader.config import LoaderConfig
from gtscale.errors import UserError


@dataclass
class DataConfig:
    shards: str  # folder holding manifest.json (written by `gtscale shard`)
    train_split: str = "train"
    eval_split: str = "valid"  # evaluated every eval.every steps and at the end
    loader: LoaderConfig = field(default_factory=LoaderConfig)  # keys / path edges are set from the model


@dataclass
class AuxDistanceConfig:
    """EGT's distance-prediction objective on the output edge embeddings (the model needs output_edges)."""

    max_hops: int = 8  # ν: predict hop counts 0..ν; farther and unreachable pairs are not scored
    weight: float = 0.1  # κ: weight of its cross-entropy in the loss


@dataclass
class TaskConfig:
    loss: Literal["l1", "mse", "bce"] = "l1"  # l1 for MAE tasks (PCQM4Mv2), bce for binary tasks
    metric: Literal["mae", "rocauc", "ap"] = "mae"  # what selects the best checkpoint
    evaluator: str = "pcqm4mv2"  # OGB evaluator: pcqm4mv2 (MAE) or an ogbg dataset name (ogbg-molhiv, ogbg-molpcba)
    head: dict = field(default_factory=dict)  # head overrides on top of the model YAML's `head` section
    target_scale: float = 1.0  # regression: the model predicts y / target_scale (keeps targets O(1))
    target_shift: float = 0.0  # regression: … and (y − target_shift)
    aux_distance: Optional[AuxDistanceConfig] = None  # EGT's auxiliary distance prediction; off when absent

    def __post_init__(self):
        if self.target_scale <= 0:
            raise ValueError("target_scale must be > 0")

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "mae"


@dataclass
class OptimizerConfig:
    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8


@dataclass
class ScheduleConfig:
    total_steps: int = 1000  # optimizer steps of the whole run
    warmup_steps: int = 100  # linear warmup from 0 to optimizer.lr
    min_lr: float = 0.0  # cosine decay ends here at total_steps

    def __post_init__(self):
        if self.total_steps < 1 or not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError("need total_steps >= 1 and 0 <= warmup_steps <= total_steps")


@dataclass
class DeepSpeedConfig:
    zero_stage: int = 2  # ZeRO stage 0-3
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    offload_optimizer: bool = False  # ZeRO-2/3: optimizer state and step on the CPU
    gradient_accumulation_steps: int = 1
    gradient_clipping: float = 1.0  # max global gradient norm; 0 = off
    extra: dict = field(default_factory=dict)  # merged into the generated DeepSpeed config as is

    def __post_init__(self):
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.gradient_accumulation_steps < 1:
            raise ValueError("gradient_accumulation_steps must be >= 1")


@dataclass
class CheckpointConfig:
    every: int = 500  # steps between checkpoints (and at the end)
    keep: int = 2  # newest complete checkpoints kept (the best one is kept apart)


@dataclass
class EvalConfig:
    every: int = 500  # steps between evaluations (and at the end); 0 = only at the end


@dataclass
class LoggingConfig:
    every: int = 10  # steps between metric lines in metrics.jsonl / TensorBoard
    tensorboard: bool = True
    progress: bool = True  # tqdm bar on rank 0


@dataclass
class TrainConfig:
    data: DataConfig
    model: Any  # a configs/models name (egt-small), a YAML path, or an inline mapping
    run_dir: str = "runs/default"
    seed: int = 0
    model_overrides: dict = field(default_factory=dict)  # fields replaced in the model config
    task: TaskConfig = field(default_factory=TaskConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    max_nonfinite: int = 5  # this many non-finite losses in a row stop the run
    max_steps: Optional[int] = None  # stop early at this step (a run cut short on purpose; tests, benchmarks)
    init_from: Optional[str] = None  # fine-tuning: a `gtscale export`ed model.pt whose backbone weights start this run


#: configs/deepspeed/ shipped with the package: `deepspeed: zero3` names one of its presets.
DEEPSPEED_PRESETS = CONFIG_ROOT / "deepspeed"


def load_train_config(path: str | Path, overrides: list[str]) -> TrainConfig:
    """Config file + dotted overrides → TrainConfig, checked; relative paths are taken from the cwd."""
    raw = load_yaml(path)
    # `deepspeed` may name a preset (also from the command line); deepspeed.* overrides go on top.
    on_preset = [o for o in overrides if o.startswith("deepspeed.")]
    raw = apply_overrides(raw, [o for o in overrides if o not in on_preset])
    if isinstance(raw.get("deepspeed"), str):
        preset = DEEPSPEED_PRESETS / f"{raw['deepspeed']}.yaml"
        if not preset.is_file():
            known = ", ".join(sorted(p.stem for p in DEEPSPEED_PRESETS.glob("*.yaml")))
            raise UserError(f"deepspeed: no preset {raw['deepspeed']!r} in {DEEPSPEED_PRESETS} (known: {known})")
        raw["deepspeed"] = load_yaml(preset)
    raw = apply_overrides(raw, on_preset)
    cfg = from_dict(TrainConfig, raw)
    manifest = Path(cfg.data.shards) / "manifest.json"
    if not manifest.is_file():
        raise UserError(f"data.shards: {manifest} not found (run `gtscale shard` first)")
    from gtscale.models import parse_model_config

    parse_model_config(resolve_model_config(cfg))  # the model's own keys, checked here too
    check_task(cfg.task)
    splits = json.loads(manifest.read_text()).get("splits", {})
    for key in ("train_split", "eval_split"):
        if getattr(cfg.data, key) not in splits:
            raise UserError(f"data.{key}: {getattr(cfg.data, key)!r} is not a split of {manifest} (has {', '.join(splits)})")
    if cfg.init_from is not None and not Path(cfg.init_from).is_file():
        raise UserError(f"init_from: {cfg.init_from} not found (write it with `gtscale export RUN_DIR`)")
    return cfg


def check_task(task: TaskConfig) -> None:
    """The evaluator must exist and report the metric that selects the best checkpoint."""
    if task.evaluator == "pcqm4mv2":
        reported = {"mae"}
    else:
        from ogb.graphproppred import Evaluator

        try:
            reported = {Evaluator(task.evaluator).eval_metric}
        except (KeyError, ValueError):
            raise UserError(f"task.evaluator: {task.evaluator!r} is neither pcqm4mv2 nor an OGB graph property dataset (ogbg-molhiv, ogbg-molpcba, …)") from None
    if task.metric not in reported:
        raise UserError(f"task.metric: {task.metric!r} is not reported by evaluator {task.evaluator!r} (it reports {', '.join(sorted(reported))})")
    if (task.loss == "bce") != (task.metric != "mae"):
        raise UserError(f"task.loss: {task.loss!r} does not suit metric {task.metric!r} (bce for rocauc/ap, l1 or mse for mae)")


def resolve_model_config(cfg: TrainConfig) -> dict:
    """The model config dict: the named/path/inline model with model_overrides applied."""
    from gtscale.models import load_model_config

    if isinstance(cfg.model, dict):
        model = dict(cfg.model)
    elif isinstance(cfg.model, str):
        model = load_model_config(cfg.model)
    else:
        raise UserError(f"model: expected a config name, a YAML path or a mapping, got {cfg.model!r}")
    unknown_head = set(cfg.model_overrides) & {"head"}
    if unknown_head:
        raise UserError("model_overrides.head: set head fields under task.head")
    model.update(cfg.model_overrides)
    return model
