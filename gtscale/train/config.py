"""The training job's configuration: one YAML, typed sections, validated before any process starts.

    gtscale train configs/tasks/nci-tpsa.yaml deepspeed.zero_stage=3 schedule.total_steps=2000

Unknown keys, wrong types, values out of range (`RANGES`), missing shard directories, an evaluator
that does not fit the shards' targets and a head the model cannot carry are reported as one line
naming the key or path (exit status 2), before any process group starts. The resolved
configuration is saved as `config.yaml` in the run directory.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from gtscale.config import CONFIG_ROOT, apply_overrides, from_dict, load_yaml
from gtscale.loader.config import LoaderConfig
from gtscale.errors import UserError


@dataclass
class GraphDataConfig:
    """Node tasks sampled online from a graph store (`gtscale graph build`) instead of read from shards."""

    store: str  # the store's folder (graph.json)
    # induced: each batch the subgraph induced by a random `fraction` of the nodes, as an EdgeBatch
    # (models that take one: sparse ET, MNA-GT); its targets are the split's nodes in it
    sampler: Literal["induced"] = "induced"
    fraction: float = 0.05  # ET paper, App. C: 5 % of the nodes per sample (T-Social, T-Finance)
    train_ratio: float = 0.4  # BWGNN / ET split: stratified training share, the rest 1:2 into val / test
    split_seed: int = 0
    mask_column: Optional[int] = None  # a stored mask column (GADBench: 0..19) instead of the ratio split


@dataclass
class DataConfig:
    # exactly one of: shards, a folder holding manifest.json (written by `gtscale shard`), or graph
    shards: Optional[str] = None
    graph: Optional[GraphDataConfig] = None
    train_split: str = "train"
    eval_split: str = "valid"  # evaluated every eval.every steps and at the end
    # loader.keys and loader.path_edges_max_dist are the model's to choose (its batch_fields and
    # multi_hop_max_dist): setting either here is an error, since the trainer would replace it.
    loader: LoaderConfig = field(default_factory=LoaderConfig)

    def __post_init__(self):
        if (self.shards is None) == (self.graph is None):
            raise ValueError("set exactly one of data.shards (a shard folder) and data.graph (a graph store sampled online)")


@dataclass
class AuxDistanceConfig:
    """EGT's distance-prediction objective on the output edge embeddings (the model needs output_edges)."""

    max_hops: int = 8  # ν: predict hop counts 0..ν; farther and unreachable pairs are not scored
    weight: float = 0.1  # κ: weight of its cross-entropy in the loss


@dataclass
class TaskConfig:
    # l1 for MAE tasks (PCQM4Mv2), bce for binary graph tasks, node_bce for node anomaly detection
    # (weighted BCE at the target nodes, ET eq. 22; see anomaly_weight)
    loss: Literal["l1", "mse", "bce", "node_bce"] = "l1"
    # what selects the best checkpoint (the evaluator must report it); node-anomaly reports auroc,
    # auprc, macro_f1 and rec_at_k (gtscale/train/node_metrics.py)
    metric: Literal["mae", "rmse", "rocauc", "ap", "auroc", "auprc", "macro_f1", "rec_at_k"] = "mae"
    # pcqm4mv2 (OGB-LSC's evaluator, one target; reports mae, and rmse from the same predictions),
    # regression (any number of targets: mae and rmse of each target over its labelled rows, averaged
    # over targets; e.g. descriptor pretraining, MoleculeACE) or an ogbg dataset name whose target count matches the shards' (ogbg-molhiv: rocauc, ogbg-molpcba: ap,
    # ogbg-molesol / -molfreesolv / -mollipo: rmse), or node-anomaly (node shards of
    # `gtscale shard graph-ego`: AUROC, AUPRC, Macro-F1, Rec@K of the eval split's target nodes)
    evaluator: str = "pcqm4mv2"
    head: dict = field(default_factory=dict)  # head overrides on top of the model YAML's `head` section (num_outputs: the shards' targets)
    target_scale: float = 1.0  # regression: the model predicts y / target_scale (keeps targets O(1))
    target_shift: float = 0.0  # regression: … and (y − target_shift)
    aux_distance: Optional[AuxDistanceConfig] = None  # EGT's auxiliary distance prediction; off when absent
    # node_bce: ω, the weight of anomalous targets; auto = #normal / #anomalous of the train split
    # (the manifest's task.label_counts), 1 = plain BCE
    anomaly_weight: Union[Literal["auto"], float] = "auto"
    features_baseline: bool = True  # node tasks: also fit and report a features-only logistic regression

    @property
    def higher_is_better(self) -> bool:
        return self.metric not in ERROR_METRICS


#: Metrics that measure an error (lower is better; regression losses l1 / mse).
ERROR_METRICS = ("mae", "rmse")


@dataclass
class OptimizerConfig:
    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # Adam's β1, β2, each in [0, 1)
    eps: float = 1e-8


@dataclass
class ScheduleConfig:
    total_steps: int = 1000  # optimizer steps of the whole run
    warmup_steps: int = 100  # linear warmup from 0 to optimizer.lr
    min_lr: float = 0.0  # cosine decay ends here at total_steps (at most optimizer.lr)


@dataclass
class FinetuneConfig:
    """How a run started from init_from treats the pretrained backbone (engine_config.param_groups)."""

    backbone_lr_scale: float = 1.0  # backbone LR = optimizer.lr × this (e.g. 0.1); the task head gets optimizer.lr
    layer_decay: float = 1.0  # layer-wise LR decay: block i of L gets × layer_decay^(L − i), embeddings ^(L + 1); 1 = off
    freeze_backbone_steps: int = 0  # backbone LR 0 for the first N optimizer steps (the head trains alone)


@dataclass
class DeepSpeedConfig:
    zero_stage: int = 2  # ZeRO stage 0-3
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    offload_optimizer: bool = False  # ZeRO-2/3: optimizer state and step on the CPU
    gradient_accumulation_steps: int = 1
    gradient_clipping: float = 1.0  # max global gradient norm; 0 = off
    extra: dict = field(default_factory=dict)  # merged into the generated DeepSpeed config as is


@dataclass
class CheckpointConfig:
    every: int = 500  # steps between checkpoints (and at the end)
    keep: int = 2  # newest complete checkpoints kept (the best one is kept apart); 0 = keep all


@dataclass
class EvalConfig:
    every: int = 500  # steps between evaluations (and at the end); 0 = only at the end


@dataclass
class LoggingConfig:
    every: int = 10  # steps between metric lines in metrics.jsonl / TensorBoard
    tensorboard: bool = True
    progress: bool = True  # tqdm bar on rank 0


@dataclass
class CompileConfig:
    """torch.compile of the task model (backbone + head), fullgraph: a graph break is an error.
    Off by default until it wins everywhere (docs/speed.md has the measurements)."""

    enabled: bool = False
    mode: Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"] = "default"  # reduce-overhead: CUDA graphs (needs data.loader.pad_to_bucket)
    cache_dir: str = "~/.cache/gtscale/inductor"  # inductor's cache, reused by resumed and later runs; must be private to you (see compile_cache.py)


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
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    max_nonfinite: int = 5  # this many non-finite losses in a row stop the run
    max_steps: Optional[int] = None  # stop early at this step (a run cut short on purpose; tests, benchmarks)
    init_from: Optional[str] = None  # fine-tuning: a `gtscale export`ed model.pt whose backbone weights start this run

    def __post_init__(self):
        check_ranges(self)


def _finite(low: float, low_open: bool = False) -> Callable[[Any, "TrainConfig"], bool]:
    """A finite number ≥ low (> low when low_open); NaN and ±inf fail."""
    return lambda v, _: math.isfinite(v) and (v > low if low_open else v >= low)


#: Every range-checked field: dotted key → (test of (value, whole config), what it must be).
#: Checked when a TrainConfig is built, so a bad value fails before any process group starts.
RANGES: dict[str, tuple[Callable[[Any, "TrainConfig"], bool], str]] = {
    "seed": (lambda v, _: 0 <= v < 2**31, "in 0..2**31-1 (numpy seeds seed + rank)"),
    "data.loader.seed": (lambda v, _: v >= 0, ">= 0"),
    # lr 0 is allowed (torch's AdamW accepts it): the weights stay as initialised, as a fine-tuning
    # test of the data path wants; a negative one would ascend the loss.
    "optimizer.lr": (_finite(0.0), ">= 0"),
    "optimizer.betas": (lambda v, _: len(v) == 2 and all(math.isfinite(b) and 0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    "optimizer.eps": (_finite(0.0, low_open=True), "> 0"),
    "optimizer.weight_decay": (_finite(0.0), ">= 0"),
    "schedule.total_steps": (lambda v, _: v >= 1, ">= 1"),
    "schedule.warmup_steps": (lambda v, c: 0 <= v <= c.schedule.total_steps, "in 0..schedule.total_steps"),
    "schedule.min_lr": (lambda v, c: math.isfinite(v) and 0 <= v <= c.optimizer.lr, "in [0, optimizer.lr]"),
    "finetune.backbone_lr_scale": (_finite(0.0), ">= 0 (0 = backbone never trained)"),
    "finetune.layer_decay": (lambda v, _: math.isfinite(v) and 0 < v <= 1, "in (0, 1] (1 = off)"),
    "finetune.freeze_backbone_steps": (lambda v, c: 0 <= v <= c.schedule.total_steps, "in 0..schedule.total_steps"),
    "deepspeed.zero_stage": (lambda v, _: v in (0, 1, 2, 3), "0, 1, 2 or 3"),
    "deepspeed.gradient_accumulation_steps": (lambda v, _: v >= 1, ">= 1"),
    "deepspeed.gradient_clipping": (_finite(0.0), ">= 0 (0 = off)"),
    "checkpoint.every": (lambda v, _: v >= 1, ">= 1"),
    "checkpoint.keep": (lambda v, _: v >= 0, ">= 0 (0 = keep all)"),
    "eval.every": (lambda v, _: v >= 0, ">= 0 (0 = only at the end)"),
    "logging.every": (lambda v, _: v >= 1, ">= 1"),
    # CUDA graphs are recorded per input shape: without one shape per bucket they would pile up
    "compile.mode": (lambda v, c: v != "reduce-overhead" or c.data.loader.pad_to_bucket, "not reduce-overhead (CUDA graphs) without data.loader.pad_to_bucket: true"),
    "data.graph.fraction": (lambda v, _: math.isfinite(v) and 0 < v <= 1, "in (0, 1]"),
    "data.graph.train_ratio": (lambda v, _: math.isfinite(v) and 0 < v < 1, "strictly between 0 and 1"),
    "data.graph.mask_column": (lambda v, _: v >= 0, ">= 0"),
    "task.target_scale": (_finite(0.0, low_open=True), "> 0"),
    "task.target_shift": (lambda v, _: math.isfinite(v), "finite"),
    "task.anomaly_weight": (lambda v, _: v == "auto" or (math.isfinite(v) and v > 0), "auto or a number > 0"),
    "task.aux_distance.max_hops": (lambda v, _: v >= 1, ">= 1"),
    "task.aux_distance.weight": (_finite(0.0), ">= 0"),
    "max_nonfinite": (lambda v, _: v >= 1, ">= 1"),
    "max_steps": (lambda v, _: v >= 1, ">= 1 (or absent)"),
}


def check_ranges(cfg: "TrainConfig") -> None:
    """Every RANGES entry holds, or a UserError naming the dotted key. Absent optional sections
    (task.aux_distance, max_steps: null) are not checked."""
    for key, (holds, requirement) in RANGES.items():
        value = functools.reduce(lambda obj, name: None if obj is None else getattr(obj, name), key.split("."), cfg)
        if value is not None and not holds(value, cfg):
            raise UserError(f"{key}: must be {requirement}, got {value!r}")


#: configs/deepspeed/ shipped with the package: `deepspeed: zero3` names one of its presets.
DEEPSPEED_PRESETS = CONFIG_ROOT / "deepspeed"


#: data.loader fields the trainer sets from the model (task_model.loader_keys): never from the YAML.
MODEL_CHOSEN_LOADER_KEYS = ("keys", "path_edges_max_dist")


#: What the trainer records in a run's config.yaml beside the TrainConfig itself (read back by
#: `gtscale evaluate`, which must leave them out to rebuild the TrainConfig).
RUN_RECORD_KEYS = ("model_resolved", "world_size", "backend")


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
    cfg = from_dict(TrainConfig, raw)  # types and RANGES
    for key in MODEL_CHOSEN_LOADER_KEYS:
        if key in raw["data"].get("loader", {}):
            raise UserError(f"data.loader.{key}: set by the model (the Batch fields it reads), not by the config; remove it")
    from gtscale.models import parse_model_config
    from gtscale.train.data_source import task_manifest
    from gtscale.train.task_model import check_task_model, task_model_config

    contents = task_manifest(cfg.data)
    manifest = contents["_dir"]
    parse_model_config(task_model_config(cfg, contents))  # the model's own keys, checked here too
    num_targets = int(contents.get("task", {}).get("num_targets", 1))
    check_task(cfg.task, num_targets, manifest, contents.get("task", {}).get("type", GRAPH_TASK))
    if "num_outputs" in cfg.task.head:  # like the loader keys: replaced, so never silently
        raise UserError(f"task.head.num_outputs: set by the shards' number of targets ({num_targets} in {manifest}), not by the config; remove it")
    check_task_model(cfg, num_targets, contents)  # task.head and task.aux_distance fit the model
    splits = contents["splits"]
    for key in ("train_split", "eval_split"):
        if getattr(cfg.data, key) not in splits:
            raise UserError(f"data.{key}: {getattr(cfg.data, key)!r} is not a split of {manifest} (has {', '.join(splits)})")
    if contents.get("task", {}).get("type") == NODE_TASK:
        from gtscale.train.node_task import resolve_anomaly_weight

        resolve_anomaly_weight(cfg.task, contents, cfg.data.train_split)  # auto needs both classes in the train split
    if cfg.init_from is not None and not Path(cfg.init_from).is_file():
        raise UserError(f"init_from: {cfg.init_from} not found (write it with `gtscale export RUN_DIR`)")
    return cfg


#: manifest task.type of node shards (`gtscale shard graph-ego`); any other type is a graph task.
NODE_TASK = "node_binary_classification"
GRAPH_TASK = "graph"
#: The evaluator of node shards, and what it reports (all higher is better).
NODE_EVALUATOR = "node-anomaly"
NODE_METRICS = ("auroc", "auprc", "macro_f1", "rec_at_k")


def check_task(task: TaskConfig, num_targets: int, manifest: Path | str = "the shards", task_type: str = GRAPH_TASK) -> None:
    """The evaluator must exist, fit the shards' task type and number of targets and report the
    metric that selects the best checkpoint; the loss must suit the metric."""
    if (task_type == NODE_TASK) != (task.evaluator == NODE_EVALUATOR):
        if task_type == NODE_TASK:
            raise UserError(f"task.evaluator: {manifest} holds node-task shards ({NODE_TASK}); use evaluator {NODE_EVALUATOR!r} with loss node_bce")
        raise UserError(f"task.evaluator: {NODE_EVALUATOR!r} needs node-task shards (`gtscale shard graph-ego`), but {manifest} holds a graph task")
    if task.evaluator == NODE_EVALUATOR:
        if task.loss != "node_bce":
            raise UserError(f"task.loss: {task.loss!r} does not suit evaluator {NODE_EVALUATOR!r} (use node_bce)")
        if task.metric not in NODE_METRICS:
            raise UserError(f"task.metric: {task.metric!r} is not reported by evaluator {NODE_EVALUATOR!r} (it reports {', '.join(NODE_METRICS)})")
        if task.aux_distance is not None:
            raise UserError("task.aux_distance: not supported for node tasks (remove it)")
        return
    if task.loss == "node_bce":
        raise UserError(f"task.loss: 'node_bce' needs evaluator {NODE_EVALUATOR!r} on node-task shards")
    if task.evaluator == "pcqm4mv2":
        reported, tasks = {"mae", "rmse"}, 1
    elif task.evaluator == "regression":
        reported, tasks = {"mae", "rmse"}, num_targets
    else:
        from ogb.graphproppred import Evaluator

        try:
            evaluator = Evaluator(task.evaluator)
        except (KeyError, ValueError):
            raise UserError(f"task.evaluator: {task.evaluator!r} is neither pcqm4mv2, regression nor an OGB graph property dataset (ogbg-molhiv, ogbg-molpcba, …)") from None
        reported, tasks = {evaluator.eval_metric}, evaluator.num_tasks
    if num_targets != tasks:
        raise UserError(f"task.evaluator: {task.evaluator!r} scores {tasks} target(s) but {manifest} has {num_targets}; choose an evaluator for {num_targets} target(s)")
    if task.metric not in reported:
        raise UserError(f"task.metric: {task.metric!r} is not reported by evaluator {task.evaluator!r} (it reports {', '.join(sorted(reported))})")
    if task.metric in NODE_METRICS:
        raise UserError(f"task.metric: {task.metric!r} is reported by evaluator {NODE_EVALUATOR!r} only (node tasks)")
    if (task.loss == "bce") != (task.metric not in ERROR_METRICS):
        raise UserError(f"task.loss: {task.loss!r} does not suit metric {task.metric!r} (bce for rocauc/ap, l1 or mse for mae/rmse)")


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
