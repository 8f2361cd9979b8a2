"""From the user's TrainConfig to the one a run trains with, and both recorded in the run directory.

`resolve_config` copies the user's config and completes the copy with what its data and its model
decide: target scaling (auto → the train split's statistics), a node task's anomaly weight, the
model config the shards complete and the Batch fields the model reads (data.loader.keys and
path_edges_max_dist). The user's object is never written to, so that the config a caller passed in
is still the one it read. The trainer writes both to the run directory:

    config.yaml            the configuration as given (overrides and DeepSpeed preset applied,
                           defaults filled in); `gtscale train RUN/config.yaml` starts the same run
    config.resolved.yaml   what the run trains with: the resolved TrainConfig, the model config
                           (model_resolved), num_targets, and the world size and backend it ran with

`gtscale evaluate` and `gtscale export` read the resolved one (`read_resolved`). A run directory
written before config.resolved.yaml existed holds the resolved configuration in its config.yaml
(with model_resolved), which is read as such; a config.yaml without model_resolved is resolved
again against its data.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch
import yaml

from gtscale.config import from_dict, load_yaml, to_dict
from gtscale.errors import UserError
from gtscale.format.manifest import is_node_task, load_manifest
from gtscale.io import atomic_write_text
from gtscale.models import build_model
from gtscale.models.config import current_field_names
from gtscale.models.export import REGRESSION_LOSSES
from gtscale.train.config import MODEL_CHOSEN_LOADER_KEYS, ResolvedConfig, TrainConfig
from gtscale.train.data_source import task_manifest
from gtscale.train.node_task import resolve_anomaly_weight
from gtscale.train.target_scaling import resolve_target_scaling
from gtscale.train.task_model import loader_keys, task_model_config
from gtscale.train.tasks import build_task

GIVEN_FILE = "config.yaml"
RESOLVED_FILE = "config.resolved.yaml"
#: The keys config.resolved.yaml holds beside the resolved TrainConfig.
RECORD_KEYS = ("model_resolved", "num_targets", "world_size", "backend")


def resolve_config(cfg: TrainConfig, manifest: dict) -> ResolvedConfig:
    """The configuration a run on `manifest` (the shards', or the graph store's) trains with: a copy
    of `cfg` (which is left as it is) completed by what the data and the model decide. A value the
    data cannot resolve (auto without the train split's statistics) is a UserError naming the key."""
    train = copy.deepcopy(cfg)  # nothing below may reach the user's config, nor a dict or list inside it
    num_targets = int(manifest.get("task", {}).get("num_targets", 1))
    task = train.task
    if task.loss in REGRESSION_LOSSES:
        shift, scale = resolve_target_scaling(task, manifest, train.data.train_split, num_targets)
        task = dataclasses.replace(task, target_shift=shift, target_scale=scale)
    if is_node_task(manifest):
        task = dataclasses.replace(task, anomaly_weight=resolve_anomaly_weight(task, manifest, train.data.train_split))
    train = dataclasses.replace(train, task=task)
    model_cfg = task_model_config(train, manifest)
    with torch.device("meta"):  # shapes only: which Batch fields the backbone reads
        backbone = build_model(model_cfg)
    keys, path_dist = loader_keys(backbone, model_cfg, build_task(train, manifest).target_key, feature_targets=task.aux_graph_feat is not None)
    # Page-locked batches make the trainer's host→GPU copies asynchronous.
    loader = dataclasses.replace(train.data.loader, keys=keys, path_edges_max_dist=path_dist,
                                 pin_memory=train.data.loader.pin_memory or torch.cuda.is_available())
    train = dataclasses.replace(train, data=dataclasses.replace(train.data, loader=loader))
    return ResolvedConfig(train=train, model=model_cfg, num_targets=num_targets)


def record_configs(run_dir: Path, given: TrainConfig, resolved: ResolvedConfig, **facts) -> None:
    """Write config.resolved.yaml (with `facts`: the world size and backend), then config.yaml,
    each atomically. config.yaml leaves out the loader keys the model chooses, which a training
    config may not set."""
    record = to_dict(resolved.train) | {"model_resolved": resolved.model, "num_targets": resolved.num_targets} | facts
    atomic_write_text(run_dir / RESOLVED_FILE, yaml.safe_dump(record, sort_keys=False))
    as_given = to_dict(given)
    as_given["data"]["loader"] = {k: v for k, v in as_given["data"]["loader"].items() if k not in MODEL_CHOSEN_LOADER_KEYS}
    atomic_write_text(run_dir / GIVEN_FILE, yaml.safe_dump(as_given, sort_keys=False))


def recorded_path(run_dir: Path) -> Path:
    """The file that records what the run trained with: config.resolved.yaml, or in a run directory
    written before it existed, config.yaml."""
    resolved = run_dir / RESOLVED_FILE
    return resolved if resolved.is_file() else run_dir / GIVEN_FILE


def read_resolved(run_dir: Path) -> ResolvedConfig:
    """The ResolvedConfig a run trained with (see the module docstring for the files it reads).
    A file that is not valid YAML, or a value out of range, is one line naming the file and key."""
    path = recorded_path(run_dir)
    if not path.is_file():
        raise UserError(f"{run_dir}: not a run directory (no {GIVEN_FILE})")
    raw = load_yaml(path)
    record = {key: raw.pop(key) for key in RECORD_KEYS if key in raw}
    try:
        train = from_dict(TrainConfig, raw)
    except UserError as err:
        raise UserError(f"{path}: {err}") from None
    if "model_resolved" not in record:  # the configuration as given: resolve it again
        return resolve_config(train, task_manifest(train.data))
    model = record["model_resolved"]
    if not isinstance(model, dict):
        raise UserError(f"{path}: model_resolved: expected a mapping, got {type(model).__name__}")
    model = current_field_names(model, f"{path}: model_resolved")  # a run of any age: fields by their current names
    num_targets = record.get("num_targets")
    if num_targets is None:  # recorded since num_targets existed: before, the shards' count, else the model's head
        manifest = Path(train.data.shards or "") / "manifest.json"
        num_targets = load_manifest(manifest)["task"]["num_targets"] if train.data.shards and manifest.is_file() else model.get("head", {}).get("num_outputs", 1)
    if isinstance(num_targets, bool) or not isinstance(num_targets, int) or num_targets < 1:
        raise UserError(f"{path}: num_targets: expected a positive integer, got {num_targets!r}")
    return ResolvedConfig(train=train, model=model, num_targets=num_targets)
