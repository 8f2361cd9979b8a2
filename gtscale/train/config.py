"""The training job's configuration: one YAML, typed sections, validated before any process starts.

    gtscale train configs/tasks/nci-tpsa.yaml deepspeed.zero_stage=3 schedule.total_steps=2000

This module is the schema: dataclasses whose fields declare their ranges (gtscale.config.ranged),
and `read_train_config`, which reports unknown keys, wrong types and values out of range as one
line naming the dotted key (exit status 2). A constraint between fields (warmup_steps ≤
total_steps, schedule.min_lr ≤ optimizer.lr, …), and whether the configuration fits its data and model (shard
directories, evaluator ↔ the shards' targets, a head the model can carry), are `preflight.py`'s
questions, asked with the same one-line errors before any process group starts.

Every section is a frozen dataclass, so the user's TrainConfig is never written to: what the data
and the model decide (target scaling, the loader's Batch fields, the model config the shards
complete) goes into a `ResolvedConfig` (resolve.py), a copy made with dataclasses.replace that the
trainer, `gtscale evaluate` and `gtscale export` work from. A run
directory records both: `config.yaml` (the configuration as given) and `config.resolved.yaml`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from gtscale.config import CONFIG_ROOT, apply_overrides, check_field_ranges, from_dict, load_yaml, ranged
from gtscale.loader.config import LoaderConfig
from gtscale.errors import UserError


@dataclass(frozen=True)
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
    fraction: float = ranged(0.05, low=0, high=1, low_open=True)  # induced: ET paper, App. C: 5 % of the nodes per sample (T-Social, T-Finance)
    train_ratio: float = ranged(0.4, low=0, high=1, low_open=True, high_open=True)  # BWGNN / ET split: stratified training share, the rest 1:2 into val / test
    split_seed: int = 0
    mask_column: Optional[int] = ranged(None, low=0)  # a stored mask column (GADBench: 0..19) instead of the ratio split
    # fanout: neighbours each node samples at each hop; ego: per-hop fan-out caps (graph-ego --fanouts)
    fanouts: list[int] = ranged(default_factory=lambda: [16, 16], low=1, min_items=1)
    batch_targets: int = ranged(1024, low=1)  # fanout: target nodes per batch
    # how `gtscale evaluate` scores a split: sampled, in batches of the sampler above as the trainer
    # evaluates; or full, every node with all of its neighbours, layer by layer over the whole store
    # (models that attend along edges one layer at a time: the sparse ET; train/full_inference.py)
    inference: Literal["sampled", "full"] = "sampled"
    max_nodes: int = ranged(64, low=1, high=65535)  # ego: node cap of an ego subgraph (--max-nodes)
    sampler_seed: int = 0  # ego: the sampler's priority seed (--sampler-seed)
    svd_rank: int = ranged(8, low=0, note="0 = off")  # ego: r of EGT's SVD encoding, 0 = off (--svd-rank)
    lap_k: int = ranged(0, low=0, note="0 = off")  # ego: Laplacian eigenpairs, 0 = off (--lap-k)


@dataclass(frozen=True)
class DataConfig:
    # exactly one of: shards, a folder holding manifest.json (written by `gtscale shard`), or graph
    shards: Optional[str] = None
    graph: Optional[GraphDataConfig] = None
    # several splits joined by "+" train on their union (shards only): "train+valid" refits on every
    # labelled molecule for a number of steps chosen on valid beforehand (`gtscale sweep --refit`)
    train_split: str = "train"
    eval_split: str = "valid"  # evaluated every eval.every steps and at the end
    # loader.keys and loader.path_edges_max_dist are the model's to choose (its batch_fields and
    # multi_hop_max_dist): setting either here is an error, since the resolved config replaces it.
    loader: LoaderConfig = field(default_factory=LoaderConfig)

    def __post_init__(self):
        if (self.shards is None) == (self.graph is None):
            raise ValueError("set exactly one of data.shards (a shard folder) and data.graph (a graph store sampled online)")


@dataclass(frozen=True)
class AuxDistanceConfig:
    """EGT's distance-prediction objective on the output edge embeddings (the model needs output_edges)."""

    max_hops: int = ranged(8, low=1)  # ν: predict hop counts 0..ν; farther and unreachable pairs are not scored
    weight: float = ranged(0.1, low=0)  # κ: weight of its cross-entropy in the loss


@dataclass(frozen=True)
class AuxGraphFeatConfig:
    """Molecule-level features as pretraining targets: a second graph head predicts the shards'
    graph_feat (`gtscale shard --graph-features`) from the pooled representation, Morgan bits by
    binary cross-entropy and rdkit2d z-scores by squared error (train/feature_targets.py). The
    features are then targets only: the task head does not read them as inputs."""

    weight: float = ranged(1.0, low=0)  # weight of its loss beside the task loss (both are means over the step's graphs)


@dataclass(frozen=True)
class TaskConfig:
    # l1 for MAE tasks (PCQM4Mv2), bce for binary graph tasks, node_bce for node anomaly detection
    # (weighted BCE at the target nodes, ET eq. 22; see anomaly_weight)
    loss: Literal["l1", "mse", "bce", "node_bce"] = "l1"
    # what selects the best checkpoint (the evaluator must report it); node-anomaly reports auroc,
    # auprc, macro_f1 and rec_at_k (gtscale/train/node_metrics.py)
    metric: Literal["mae", "rmse", "rocauc", "ap", "auroc", "auprc", "macro_f1", "rec_at_k"] = "mae"
    # pcqm4mv2 (OGB-LSC's evaluator, one target; reports mae, and rmse from the same predictions),
    # regression (any number of targets: mae and rmse of each target over its labelled rows, averaged
    # over targets; e.g. descriptor pretraining, MoleculeACE), binary (any number of 0/1 targets:
    # rocauc and ap of each target over its labelled rows, averaged over the targets with both
    # classes; e.g. `gtscale fit`'s classifiers) or an ogbg dataset name whose target count matches the shards' (ogbg-molhiv: rocauc, ogbg-molpcba: ap,
    # ogbg-molesol / -molfreesolv / -mollipo: rmse), or node-anomaly (node shards of
    # `gtscale shard graph-ego`: AUROC, AUPRC, Macro-F1, Rec@K of the eval split's target nodes)
    evaluator: str = "pcqm4mv2"
    head: dict = field(default_factory=dict)  # head overrides on top of the model YAML's `head` section (num_outputs: the shards' targets)
    # regression: the model predicts (y − target_shift) / target_scale, which keeps targets O(1).
    # auto = the train split's mean and std of each target (the manifest's task.target_stats,
    # recorded by the sharder; target_scaling.py); a number applies to every target, a list gives
    # one per target. The run's config.resolved.yaml records the values used.
    target_scale: Union[Literal["auto"], float, list[float]] = ranged("auto", low=0, low_open=True)
    target_shift: Union[Literal["auto"], float, list[float]] = ranged("auto")
    aux_distance: Optional[AuxDistanceConfig] = None  # EGT's auxiliary distance prediction; off when absent
    aux_graph_feat: Optional[AuxGraphFeatConfig] = None  # predict the shards' graph_feat too (pretraining); off when absent
    # node_bce: ω, the weight of anomalous targets; auto = #normal / #anomalous of the train split
    # (the manifest's task.label_counts), 1 = plain BCE
    anomaly_weight: Union[Literal["auto"], float] = ranged("auto", low=0, low_open=True)
    features_baseline: bool = True  # node tasks: also fit and report a features-only logistic regression

    @property
    def higher_is_better(self) -> bool:
        return self.metric not in ERROR_METRICS


#: Metrics that measure an error (lower is better; regression losses l1 / mse).
ERROR_METRICS = ("mae", "rmse")


@dataclass(frozen=True)
class OptimizerConfig:
    # lr 0 is allowed (torch's AdamW accepts it): the weights stay as initialised, as a fine-tuning
    # test of the data path wants; a negative one would ascend the loss.
    lr: float = ranged(1e-3, low=0)  # peak learning rate, reached at the end of warmup
    weight_decay: float = ranged(0.0, low=0)
    betas: list[float] = ranged(default_factory=lambda: [0.9, 0.999], low=0, high=1, high_open=True, min_items=2, max_items=2)  # Adam's β1, β2
    eps: float = ranged(1e-8, low=0, low_open=True)


@dataclass(frozen=True)
class ScheduleConfig:
    total_steps: int = ranged(1000, low=1)  # optimizer steps of the whole run
    warmup_steps: int = 100  # linear warmup from 0 to optimizer.lr; in 0..total_steps (preflight.check_cross_fields)
    min_lr: float = 0.0  # cosine decay ends here at total_steps; in [0, optimizer.lr] (preflight.check_cross_fields)


@dataclass(frozen=True)
class FinetuneConfig:
    """How a run started from init_from treats the pretrained backbone (engine_config.param_groups)."""

    backbone_lr_scale: float = ranged(1.0, low=0, note="0 = backbone never trained")  # backbone LR = optimizer.lr × this (e.g. 0.1); the task head gets optimizer.lr
    layer_decay: float = ranged(1.0, low=0, high=1, low_open=True, note="1 = off")  # layer-wise LR decay: block i of L gets × layer_decay^(L − i), embeddings ^(L + 1); 1 = off
    freeze_backbone_steps: int = 0  # backbone LR 0 for the first N optimizer steps (the head trains alone); in 0..schedule.total_steps


@dataclass(frozen=True)
class DeepSpeedConfig:
    zero_stage: int = ranged(2, low=0, high=3)  # ZeRO stage
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    offload_optimizer: bool = False  # ZeRO-2/3: optimizer state and step on the CPU
    gradient_accumulation_steps: int = ranged(1, low=1)
    gradient_clipping: float = ranged(1.0, low=0, note="0 = off")  # max global gradient norm
    extra: dict = field(default_factory=dict)  # merged into the generated DeepSpeed config as is


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = ranged(500, low=1)  # steps between checkpoints (and at the end)
    keep: int = ranged(2, low=0, note="0 = keep all")  # newest complete checkpoints kept (the best one is kept apart)


@dataclass(frozen=True)
class EvalConfig:
    # steps between evaluations (and at the end); 0 = only at the end; epoch = once per pass over
    # the train split (eval_schedule.py), which suits small sets (MoleculeACE: ~75 steps of 32)
    every: Union[Literal["epoch"], int] = ranged(500, low=0, note="0 = only at the end, or epoch")
    patience: int = ranged(0, low=0, note="0 = never stop early")  # stop after this many evaluations in a row without a better task.metric
    # evaluations up to this step (and during the warm-up) can set a best but never use up patience:
    # a run stops early only once its learning rate has decayed (small sets evaluated every epoch
    # otherwise stop within a few hundred steps of a cosine schedule whose rate never fell)
    min_steps: int = ranged(0, low=0)
    # how the eval split of a graph store (data.graph) is scored: sampled, in batches of data.graph's
    # sampler on every rank; or full, every node with all of its neighbours, layer by layer over the
    # store on rank 0 (train/full_inference.py: the sparse ET), as `gtscale evaluate --inference full`
    # scores. Either way task.metric of the same predictions chooses the best checkpoint. full needs
    # data.graph (preflight.check_cross_fields) and a model with a layer-wise form (task_model.check_task_model).
    inference: Literal["sampled", "full"] = "sampled"


@dataclass(frozen=True)
class LoggingConfig:
    every: int = ranged(10, low=1)  # steps between metric lines in metrics.jsonl / TensorBoard
    tensorboard: bool = True
    progress: bool = True  # tqdm bar on rank 0


@dataclass(frozen=True)
class CompileConfig:
    """torch.compile of the task model (backbone + head), fullgraph: a graph break is an error.
    Off by default until it wins everywhere (docs/speed.md has the measurements)."""

    enabled: bool = False
    mode: Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"] = "default"  # reduce-overhead: CUDA graphs (needs data.loader.pad_to_bucket)
    cache_dir: str = "~/.cache/gtscale/inductor"  # inductor's cache, reused by resumed and later runs; must be private to you (see compile_cache.py)


@dataclass(frozen=True)
class TrainConfig:
    data: DataConfig
    model: Any  # a configs/models name (egt-small), a YAML path, or an inline mapping
    run_dir: str = "runs/default"
    seed: int = ranged(0, low=0, high=2**31 - 1, note="numpy seeds seed + rank")
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
    max_nonfinite: int = ranged(5, low=1)  # this many non-finite losses in a row stop the run
    max_steps: Optional[int] = ranged(None, low=1)  # stop early at this step (a run cut short on purpose; tests, benchmarks)
    init_from: Optional[str] = None  # fine-tuning: a `gtscale export`ed model.pt whose backbone weights start this run

    def __post_init__(self):  # a TrainConfig built in code, or copied with dataclasses.replace, meets the same ranges
        check_field_ranges(self)


#: configs/deepspeed/ shipped with the package: `deepspeed: zero3` names one of its presets.
DEEPSPEED_PRESETS = CONFIG_ROOT / "deepspeed"


#: data.loader fields the trainer sets from the model (task_model.loader_keys): never from the YAML.
MODEL_CHOSEN_LOADER_KEYS = ("keys", "path_edges_max_dist")


@dataclass(frozen=True)
class ResolvedConfig:
    """What a run trains with: the user's TrainConfig completed by what its data and its model
    decide (resolve.py). A copy: the user's object is never written to. The trainer, `gtscale
    evaluate` and `gtscale export` work from it; a run directory records it as config.resolved.yaml
    beside the user's config.yaml."""

    # The user's config, copied, with task.target_shift / target_scale numbers (regression: auto is
    # the train split's statistics), task.anomaly_weight a number (node tasks), and data.loader's
    # keys and path_edges_max_dist the Batch fields the model reads (pin_memory on where CUDA is).
    train: TrainConfig
    # The model config: the named / path / inline model with model_overrides, completed by the
    # shards (task_model.task_model_config: head.graph_features; node_float_dim and a node head on
    # node shards).
    model: dict
    num_targets: int  # the shards' targets: one head output each

    @property
    def head(self) -> dict:
        """The task head as built: the model config's head, task.head on top, one output per target."""
        return {**self.model.get("head", {"kind": "graph"}), **self.train.task.head, "num_outputs": self.num_targets}


def read_train_config(path: str | Path, overrides: list[str]) -> TrainConfig:
    """Config file + dotted overrides → TrainConfig: types, ranges and the keys the model sets.
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
    cfg = from_dict(TrainConfig, raw)  # types and ranges
    for key in MODEL_CHOSEN_LOADER_KEYS:
        if key in raw["data"].get("loader", {}):
            raise UserError(f"data.loader.{key}: set by the model (the Batch fields it reads), not by the config; remove it")
    return cfg


def resolve_model_config(cfg: TrainConfig) -> dict:
    """The model config dict: the named/path/inline model with model_overrides applied; a new dict
    that shares nothing with `cfg`, so that what its readers add to it never reaches the user's config.
    The model's fields and the overrides both under their current names (models.config.RENAMED_FIELDS):
    a run directory's config.yaml of any age starts the same run."""
    from gtscale.models import load_model_config
    from gtscale.models.config import current_field_names

    if isinstance(cfg.model, dict):
        model = current_field_names(copy.deepcopy(cfg.model), "model")
    elif isinstance(cfg.model, str):
        model = load_model_config(cfg.model)
    else:
        raise UserError(f"model: expected a config name, a YAML path or a mapping, got {cfg.model!r}")
    unknown_head = set(cfg.model_overrides) & {"head"}
    if unknown_head:
        raise UserError("model_overrides.head: set head fields under task.head")
    model.update(current_field_names(copy.deepcopy(cfg.model_overrides), "model_overrides", model.get("name")))
    return model
