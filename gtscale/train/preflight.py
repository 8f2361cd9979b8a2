"""Preflight: does the configuration fit its data and its model? Asked once, before any process
group starts, so that a mismatch is one line naming the key (exit status 2) rather than a failure
on every rank.

`config.py` checks each field on its own (types, the ranges declared on the fields); this module
checks what involves several fields (`check_cross_fields`: the schedule's steps, min_lr against
optimizer.lr, compile against ZeRO and the loader, eval.inference against data.graph), and the
config against what it names: the shards' manifest (or the graph store's), the model built from
the model config (on the meta device) and the task (evaluator ↔ task type and target count, metric ↔ evaluator, loss ↔ metric,
node-task anomaly weight). `load_train_config` is all of them, the entry point of every command
that starts or plans a run.
"""

from __future__ import annotations

import math
from pathlib import Path

from gtscale.errors import UserError
from gtscale.format.manifest import GRAPH_TASK, NODE_TASK, SPLIT_UNION, missing_split, task_type
from gtscale.models import parse_model_config, pretrained
from gtscale.train.engine_config import deepspeed_config
from gtscale.train.config import ERROR_METRICS, TaskConfig, TrainConfig, read_train_config
from gtscale.train.data_source import task_manifest
from gtscale.train.node_metrics import METRICS as NODE_METRICS
from gtscale.train.resolve import resolve_config
from gtscale.train.task_model import check_task_model, task_model_config

#: The evaluator of node shards; it reports node_metrics.METRICS (all higher is better).
NODE_EVALUATOR = "node-anomaly"


def load_train_config(path: str | Path, overrides: list[str]) -> TrainConfig:
    """Config file + dotted overrides → TrainConfig, checked field by field (config.read_train_config),
    across fields (`check_cross_fields`) and against its data and model (`check_run`)."""
    return check_run(check_cross_fields(read_train_config(path, overrides)))


def check_cross_fields(cfg: TrainConfig) -> TrainConfig:
    """The constraints between fields, each a UserError naming the dotted key (a field's own range
    is declared on it and checked as it is read); returns `cfg` unchanged."""
    total = cfg.schedule.total_steps
    if not 0 <= cfg.schedule.warmup_steps <= total:
        raise UserError(f"schedule.warmup_steps: must be in 0..schedule.total_steps, got {cfg.schedule.warmup_steps!r}")
    if not (math.isfinite(cfg.schedule.min_lr) and 0 <= cfg.schedule.min_lr <= cfg.optimizer.lr):
        raise UserError(f"schedule.min_lr: must be in [0, optimizer.lr], got {cfg.schedule.min_lr!r}")
    if not 0 <= cfg.finetune.freeze_backbone_steps <= total:
        raise UserError(f"finetune.freeze_backbone_steps: must be in 0..schedule.total_steps, got {cfg.finetune.freeze_backbone_steps!r}")
    if cfg.compile.enabled and cfg.deepspeed.zero_stage >= 3:
        raise UserError(f"compile.enabled: must be false with deepspeed.zero_stage 3 (its per-module parameter hooks break the one compiled graph), got {cfg.compile.enabled!r}")
    # CUDA graphs are recorded per input shape: without one shape per bucket they would pile up
    if cfg.compile.mode == "reduce-overhead" and not cfg.data.loader.pad_to_bucket:
        raise UserError(f"compile.mode: must be not reduce-overhead (CUDA graphs) without data.loader.pad_to_bucket: true, got {cfg.compile.mode!r}")
    # full inference scores the nodes of a graph store; whether the model has a layer-wise form is
    # task_model.check_task_model's question (it builds the model)
    if cfg.eval.inference == "full" and cfg.data.graph is None:
        raise UserError(f"eval.inference: must be sampled without data.graph (full scores the nodes of a graph store), got {cfg.eval.inference!r}")
    return cfg


def check_run(cfg: TrainConfig) -> TrainConfig:
    """The manifest ↔ model ↔ task checks of a TrainConfig, which include resolving it
    (resolve.resolve_config, as the trainer will); returns `cfg`, unchanged."""
    contents = task_manifest(cfg.data)
    manifest = contents["_dir"]
    parse_model_config(task_model_config(cfg, contents))  # the model's own keys, checked here too
    num_targets = int(contents.get("task", {}).get("num_targets", 1))
    check_task(cfg.task, num_targets, manifest, task_type(contents))
    if "num_outputs" in cfg.task.head:  # like the loader keys: replaced, so never silently
        raise UserError(f"task.head.num_outputs: set by the shards' number of targets ({num_targets} in {manifest}), not by the config; remove it")
    splits = contents["splits"]
    if cfg.data.graph is not None and SPLIT_UNION in cfg.data.train_split:
        raise UserError(f"data.train_split: {cfg.data.train_split!r} joins splits, which shards support (data.shards), not a graph store's node splits")
    if SPLIT_UNION in cfg.data.eval_split:
        raise UserError(f"data.eval_split: {cfg.data.eval_split!r} joins splits; the run is evaluated on one (data.train_split may join several)")
    for key in ("train_split", "eval_split"):
        missing = missing_split(contents, getattr(cfg.data, key))
        if missing is not None:
            raise UserError(f"data.{key}: {missing!r} is not a split of {manifest} (has {', '.join(splits)})")
    # auto target scaling needs the train split's statistics, an auto anomaly weight both classes in it
    resolved = resolve_config(cfg, contents)
    check_task_model(resolved, contents)  # task.head and task.aux_distance fit the model
    if cfg.init_from is not None:
        init_weights(cfg.init_from)
    deepspeed_config(cfg, world_size=1, micro_batch=1)  # deepspeed.extra may not replace what gtscale sets
    return cfg


def init_weights(init_from: str) -> Path:
    """init_from's model.pt (a model.pt, an export folder or a shipped backbone's name); a
    UserError naming init_from when there is none."""
    try:
        path = pretrained.weights_path(init_from)
    except UserError as err:
        raise UserError(f"init_from: {err}") from None
    if not path.is_file():
        raise UserError(f"init_from: {init_from} holds no {path.name} (write an export with `gtscale export RUN_DIR`)")
    return path


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
        for aux in ("aux_distance", "aux_graph_feat"):
            if getattr(task, aux) is not None:
                raise UserError(f"task.{aux}: not supported for node tasks (remove it)")
        return
    if task.loss == "node_bce":
        raise UserError(f"task.loss: 'node_bce' needs evaluator {NODE_EVALUATOR!r} on node-task shards")
    if task.evaluator == "pcqm4mv2":
        reported, tasks = {"mae", "rmse"}, 1
    elif task.evaluator == "regression":
        reported, tasks = {"mae", "rmse"}, num_targets
    elif task.evaluator == "binary":
        reported, tasks = {"rocauc", "ap"}, num_targets
    else:
        from ogb.graphproppred import Evaluator

        try:
            evaluator = Evaluator(task.evaluator)
        except (KeyError, ValueError):
            raise UserError(f"task.evaluator: {task.evaluator!r} is neither pcqm4mv2, regression, binary nor an OGB graph property dataset (ogbg-molhiv, …)") from None
        reported, tasks = {evaluator.eval_metric}, evaluator.num_tasks
    if num_targets != tasks:
        raise UserError(f"task.evaluator: {task.evaluator!r} scores {tasks} target(s) but {manifest} has {num_targets}; choose an evaluator for {num_targets} target(s)")
    if task.metric not in reported:
        raise UserError(f"task.metric: {task.metric!r} is not reported by evaluator {task.evaluator!r} (it reports {', '.join(sorted(reported))})")
    if task.metric in NODE_METRICS:
        raise UserError(f"task.metric: {task.metric!r} is reported by evaluator {NODE_EVALUATOR!r} only (node tasks)")
    if (task.loss == "bce") != (task.metric not in ERROR_METRICS):
        raise UserError(f"task.loss: {task.loss!r} does not suit metric {task.metric!r} (bce for rocauc/ap, l1 or mse for mae/rmse)")
