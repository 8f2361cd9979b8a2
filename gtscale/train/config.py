"""The training job's configuration: one YAML, typed sections, validated before any process starts.

    gtscale train configs/tasks/nci-tpsa.yaml deepspeed.zero_stage=3 schedule.total_steps=2000

This module is the schema: dataclasses, `RANGES` and `read_train_config`, which reports unknown
keys, wrong types and values out of range as one line naming the key (exit status 2). Whether the
configuration fits its data and model (shard directories, evaluator ↔ the shards' targets, a head
the model can carry) is `preflight.py`'s question, asked with the same one-line errors before any
process group starts. The resolved configuration is saved as `config.yaml` in the run directory.
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
    # (models that take one: sparse ET, MNA-GT); its targets are the split's nodes in it.
    # fanout: batch_targets target nodes, each with its k-hop neighbourhood sampled with per-hop
    # `fanouts` (without replacement; all neighbours when fewer), as an EdgeBatch of one graph per
    # target, only the targets scored (sparse ET, MNA-GT; gtscale/graphs/fanout.py).
    # ego: each target node's ego subgraph, sampled as `gtscale shard graph-ego` samples it with the
    # ego options below, as padded Batches (the dense models: EGT, Graphormer)
    sampler: Literal["induced", "fanout", "ego"] = "induced"
    fraction: float = 0.05  # induced: ET paper, App. C: 5 % of the nodes per sample (T-Social, T-Finance)
    train_ratio: float = 0.4  # BWGNN / ET split: stratified training share, the rest 1:2 into val / test
    split_seed: int = 0
    mask_column: Optional[int] = None  # a stored mask column (GADBench: 0..19) instead of the ratio split
    # fanout: neighbours each node samples at each hop; ego: per-hop fan-out caps (graph-ego --fanouts)
    fanouts: list[int] = field(default_factory=lambda: [16, 16])
    batch_targets: int = 1024  # fanout: target nodes per batch
    # how `gtscale evaluate` scores a split: sampled, in batches of the sampler above as the trainer
    # evaluates; or full, every node with all of its neighbours, layer by layer over the whole store
    # (models that attend along edges one layer at a time: the sparse ET; train/full_inference.py)
    inference: Literal["sampled", "full"] = "sampled"
    max_nodes: int = 64  # ego: node cap of an ego subgraph (--max-nodes)
    sampler_seed: int = 0  # ego: the sampler's priority seed (--sampler-seed)
    svd_rank: int = 8  # ego: r of EGT's SVD encoding, 0 = off (--svd-rank)
    lap_k: int = 0  # ego: Laplacian eigenpairs, 0 = off (--lap-k)


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
class AuxGraphFeatConfig:
    """Molecule-level features as pretraining targets: a second graph head predicts the shards'
    graph_feat (`gtscale shard --graph-features`) from the pooled representation, Morgan bits by
    binary cross-entropy and rdkit2d z-scores by squared error (train/feature_targets.py). The
    features are then targets only: the task head does not read them as inputs."""

    weight: float = 1.0  # weight of its loss beside the task loss (both are means over the step's graphs)


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
    # regression: the model predicts (y − target_shift) / target_scale, which keeps targets O(1).
    # auto = the train split's mean and std of each target (the manifest's task.target_stats,
    # recorded by the sharder; target_scaling.py); a number applies to every target, a list gives
    # one per target. The run's config.yaml records the values used.
    target_scale: Union[Literal["auto"], float, list[float]] = "auto"
    target_shift: Union[Literal["auto"], float, list[float]] = "auto"
    aux_distance: Optional[AuxDistanceConfig] = None  # EGT's auxiliary distance prediction; off when absent
    aux_graph_feat: Optional[AuxGraphFeatConfig] = None  # predict the shards' graph_feat too (pretraining); off when absent
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
    # steps between evaluations (and at the end); 0 = only at the end; epoch = once per pass over
    # the train split (eval_schedule.py), which suits small sets (MoleculeACE: ~75 steps of 32)
    every: Union[Literal["epoch"], int] = 500
    patience: int = 0  # stop after this many evaluations in a row without a better task.metric; 0 = never
    # evaluations up to this step (and during the warm-up) can set a best but never use up patience:
    # a run stops early only once its learning rate has decayed (small sets evaluated every epoch
    # otherwise stop within a few hundred steps of a cosine schedule whose rate never fell)
    min_steps: int = 0
    # how the eval split of a graph store (data.graph) is scored: sampled, in batches of data.graph's
    # sampler on every rank; or full, every node with all of its neighbours, layer by layer over the
    # store on rank 0 (train/full_inference.py: the sparse ET), as `gtscale evaluate --inference full`
    # scores. Either way task.metric of the same predictions chooses the best checkpoint.
    inference: Literal["sampled", "full"] = "sampled"


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


def _as_list(value: float | list[float]) -> list[float]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


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
    "eval.every": (lambda v, _: v == "epoch" or v >= 0, ">= 0 (0 = only at the end), or epoch"),
    "eval.patience": (lambda v, _: v >= 0, ">= 0 (0 = never stop early)"),
    "eval.min_steps": (lambda v, _: v >= 0, ">= 0"),
    "eval.inference": (lambda v, c: v == "sampled" or c.data.graph is not None, "sampled without data.graph (full scores the nodes of a graph store)"),
    "logging.every": (lambda v, _: v >= 1, ">= 1"),
    # CUDA graphs are recorded per input shape: without one shape per bucket they would pile up
    "compile.enabled": (lambda v, c: not v or c.deepspeed.zero_stage < 3, "false with deepspeed.zero_stage 3 (its per-module parameter hooks break the one compiled graph)"),
    "compile.mode": (lambda v, c: v != "reduce-overhead" or c.data.loader.pad_to_bucket, "not reduce-overhead (CUDA graphs) without data.loader.pad_to_bucket: true"),
    "data.graph.fraction": (lambda v, _: math.isfinite(v) and 0 < v <= 1, "in (0, 1]"),
    "data.graph.train_ratio": (lambda v, _: math.isfinite(v) and 0 < v < 1, "strictly between 0 and 1"),
    "data.graph.mask_column": (lambda v, _: v >= 0, ">= 0"),
    "data.graph.fanouts": (lambda v, _: len(v) >= 1 and all(f >= 1 for f in v), "one or more fan-outs, each >= 1"),
    "data.graph.batch_targets": (lambda v, _: v >= 1, ">= 1"),
    "data.graph.max_nodes": (lambda v, _: 1 <= v <= 65535, "in 1..65535"),
    "data.graph.svd_rank": (lambda v, _: v >= 0, ">= 0 (0 = off)"),
    "data.graph.lap_k": (lambda v, _: v >= 0, ">= 0 (0 = off)"),
    "task.target_scale": (lambda v, _: v == "auto" or all(math.isfinite(x) and x > 0 for x in _as_list(v)), "> 0 (a number, one per target, or auto)"),
    "task.target_shift": (lambda v, _: v == "auto" or all(math.isfinite(x) for x in _as_list(v)), "finite (a number, one per target, or auto)"),
    "task.anomaly_weight": (lambda v, _: v == "auto" or (math.isfinite(v) and v > 0), "auto or a number > 0"),
    "task.aux_distance.max_hops": (lambda v, _: v >= 1, ">= 1"),
    "task.aux_distance.weight": (_finite(0.0), ">= 0"),
    "task.aux_graph_feat.weight": (_finite(0.0), ">= 0"),
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
RUN_RECORD_KEYS = ("model_resolved", "num_targets", "world_size", "backend")


def read_train_config(path: str | Path, overrides: list[str]) -> TrainConfig:
    """Config file + dotted overrides → TrainConfig: types, RANGES and the keys the model sets.
    Reads no shards and builds no model: `preflight.load_train_config` adds those cross-checks.
    Relative paths are taken from the cwd."""
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
    return cfg


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
