"""A gtscale export: the one folder format for a trained or imported model.

`gtscale export` (a run's checkpoint), `gtscale import-checkpoint` (an authors' checkpoint),
`gtscale baseline ecfp` and `gtscale baseline kernel` (their SVRs, `name: ecfp-svr` and
`kernel-svr`, and on a binary task their calibrated SVCs, `ecfp-svc` and `kernel-svc`, which only
`gtscale predict` reads) write it with `write_export`; init_from,
`gtscale evaluate` and anything that predicts read it with `read_export` / `read_weights` /
`load_exported`. The folder holds

    model.pt     tensors only (floating ones fp32), keys backbone.* and head.* (the layout of
                 ExportedModel); read with torch.load(weights_only=True), so nothing in it can run code
    model.yaml   the model config (a configs/models/ YAML) with the head in its `head` section
    export.json  where the weights came from (run_dir + tag, or source + format), the parameter
                 count and the SHA-256 of model.pt's tensors (tensors_sha256, checked on every read:
                 a flipped byte no range check finds); its presence marks the folder as one gtscale
                 wrote; for `gtscale predict`, the run's task and how its shards were made (ExportRecord)

Each file is written via a temporary name and a rename: a reader sees it whole or not at all.
`read_export` checks what it reads before anyone uses it: model.yaml against the model and head
configs (their fields' ranges), export.json against ExportRecord, the two against each other
(one target name, shift and scale per head output; the head's graph features the shards'), and
every floating tensor finite. A tampered value is one line naming the file and key, never a
traceback or a blank prediction later. The SVRs' own model.yaml keys and tensors are their
readers' (members/svr.py, kernel_svr.py) to check, as they are read.
The model modules themselves stay free of files; this module is where their weights meet disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Union

import torch
import yaml
from torch import nn

from gtscale.config import from_dict, ranged
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.io import atomic_write_text, claim_out_dir, describe_load_failure, refused_global, safe_torch_load
from gtscale.models import MODELS, build_head, build_model, parse_model_config
from gtscale.models.config import MAX_WIDTH, HeadConfig, current_field_names

MODEL_FILE = "model.pt"
CONFIG_FILE = "model.yaml"
META_FILE = "export.json"
FILES = (MODEL_FILE, CONFIG_FILE, META_FILE)
#: An ensemble export (`gtscale fit`'s DIR/export): this file lists the member export folders beside it and their weights.
ENSEMBLE_FILE, ENSEMBLE_FORMAT = "ensemble.json", "gtscale-ensemble"
#: An export of several targets (`gtscale fit --target-columns a b`'s DIR/export): this file lists the
#: targets and, for each, the folder beside it that predicts it (an export of one target: members/load.py's load_members).
TARGETS_FILE, TARGETS_FORMAT = "targets.json", "gtscale-targets"
#: What marks a folder as an export gtscale wrote (both writers record the parameter count; an ensemble or targets record its format).
EXPORT_MARKERS = {META_FILE: lambda meta: "parameters" in meta, ENSEMBLE_FILE: lambda record: record.get("format") == ENSEMBLE_FORMAT,
                  TARGETS_FILE: lambda record: record.get("format") == TARGETS_FORMAT}


def claim_export_dir(out: str | os.PathLike, option: str = "--out") -> Path:
    """Refuse, before any work, an output folder that holds anything but an earlier export (gtscale.io.claim_out_dir)."""
    return claim_out_dir(out, EXPORT_MARKERS, option=option, nested=True)  # RUN/export may hold evaluate's RUN/export/<tag>/


class ExportedModel(nn.Module):
    """backbone + task head: the module whose state_dict an export's model.pt is (keys backbone.*, head.*).

    The trainer's task model is this with EGT's distance head added (which is not exported)."""

    def __init__(self, backbone: nn.Module, head: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, batch) -> torch.Tensor:
        """The task scores: the head on the backbone's outputs, beside the batch's molecule
        features (graph_feat) when the head reads them."""
        graph_feat = getattr(batch, "graph_feat", None) if getattr(self.head.cfg, "graph_features", 0) else None
        return self.head(self.backbone(batch), graph_feat)


# --- what export.json holds ---------------------------------------------------------------------
# Records whose other keys belong to other readers are OPEN: the keys typed here are the ones an
# export's reader interprets (how to featurise a molecule, how head outputs become predictions).


@dataclass
class TransformRecord:
    """shards.transform: how the shards' records were made (the manifest's `transform`, from
    prep's StructureOptions and ShardOptions), which new molecules must repeat."""

    OPEN = True
    spd: bool = True
    degree: bool = True
    svd_rank: int = ranged(8, low=0, high=MAX_WIDTH)
    lap_k: int = ranged(8, low=0, high=MAX_WIDTH)
    paths: Literal[schema.PATH_RULES] = "bfs"
    max_nodes: Optional[int] = ranged(None, low=1, high=schema.MAX_NODES)  # null: no cap
    graph_features: list[Literal[schema.GRAPH_FEATURE_GENERATORS]] = field(default_factory=list)


@dataclass
class DescriptorStats:
    """shards.features.graph.rdkit2d: the train split's statistics that standardise each descriptor."""

    names: list[str]
    mean: list[float] = ranged(default_factory=list)
    std: list[float] = ranged(default_factory=list, low=0, low_open=True)

    def __post_init__(self):
        if not len(self.names) == len(self.mean) == len(self.std):
            raise ValueError(f"names, mean and std must have one entry per descriptor ({len(self.names)}, {len(self.mean)}, {len(self.std)})")


@dataclass
class GraphFeaturesRecord:
    """shards.features.graph: the molecule-level features (graph_feat) the head reads beside the graph."""

    generators: list[Literal[schema.GRAPH_FEATURE_GENERATORS]]
    dim: int = ranged(low=1, high=2**20)
    rdkit2d: Optional[DescriptorStats] = None

    def __post_init__(self):
        if not self.generators or len(set(self.generators)) != len(self.generators):
            raise ValueError(f"generators must name distinct generators, got {self.generators}")
        if ("rdkit2d" in self.generators) != (self.rdkit2d is not None):
            raise ValueError("rdkit2d statistics belong with the rdkit2d generator, and only with it")


@dataclass
class FeaturesRecord:
    """shards.features: the record's feature widths (node, edge, node_float) and graph features."""

    OPEN = True
    graph: Optional[GraphFeaturesRecord] = None


@dataclass
class ShardTaskRecord:
    """shards.task: the shards' targets."""

    OPEN = True
    type: str = "graph"
    num_targets: Optional[int] = ranged(None, low=1, high=MAX_WIDTH)
    target_names: Optional[list[str]] = None


@dataclass
class ShardsRecord:
    """export.json `shards`: the training shards' manifest sections that featurising molecules needs."""

    dataset: str = ""
    transform: TransformRecord = field(default_factory=TransformRecord)
    task: ShardTaskRecord = field(default_factory=ShardTaskRecord)
    features: FeaturesRecord = field(default_factory=FeaturesRecord)


#: Losses whose head outputs become predictions as score × target_scale + target_shift (the
#: trainer resolves both to numbers for them).
REGRESSION_LOSSES = ("l1", "mse")


@dataclass
class TaskRecord:
    """export.json `task`: the run's task section (train.config.TaskConfig, which `gtscale predict`
    builds from it); typed here, the keys that turn head outputs into predictions: a regression
    head predicts (y − target_shift) / target_scale."""

    OPEN = True
    loss: str = "l1"
    target_shift: Union[Literal["auto"], float, list[float]] = ranged("auto")
    target_scale: Union[Literal["auto"], float, list[float]] = ranged("auto", low=0, low_open=True)


@dataclass
class BackboneRecord:
    """export.json `backbone`: the task and shards record of the backbone an export carries (the
    kernel SVR's, whose model.yaml holds that backbone's config under `backbone`)."""

    task: Optional[TaskRecord] = None
    shards: Optional[ShardsRecord] = None


@dataclass
class ExportRecord:
    """export.json. Every writer records the parameter count; the rest names the source."""

    parameters: int = ranged(low=0)
    run_dir: Optional[str] = None  # `gtscale export`: the run and its checkpoint tag
    tag: Optional[str] = None
    source: Optional[str] = None  # `gtscale import-checkpoint` (and its format, --set), the baselines
    format: Optional[str] = None
    overrides: list[str] = field(default_factory=list)
    tensors_sha256: Optional[str] = None  # tensors_sha256 of model.pt's tensors (absent from exports written before it was kept)
    task: Optional[TaskRecord] = None  # what `gtscale predict` needs (absent from imports)
    shards: Optional[ShardsRecord] = None
    backbone: Optional[BackboneRecord] = None


@dataclass
class Export:
    """An export read back: the model config (with `head`), the tensors, and export.json."""

    folder: Path
    config: dict
    state: dict[str, torch.Tensor]
    meta: dict


def build_exported(model_cfg: dict) -> ExportedModel:
    """The module an export's weights belong to, freshly initialised."""
    backbone = build_model(model_cfg)
    return ExportedModel(backbone, build_head(model_cfg.get("head", {"kind": "graph"}), backbone))


def check_fits(state: dict, model_cfg: dict, where: str) -> ExportedModel:
    """The model built from the config with the weights loaded; an error naming any key or shape
    that does not fit (an importer's contract with the model code), or a config the model code
    refuses, prefixed with `where`.

    The shapes are compared on the meta device first: a config that does not fit its weights
    costs no parameter memory, however large it claims the model is."""
    try:
        with torch.device("meta"):
            expected = build_exported(model_cfg).state_dict()
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items() if k in state and state[k].shape != v.shape]
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if wrong or missing or unexpected:
        raise UserError(f"{where}: does not fit the model (shapes {wrong}, missing {missing}, unexpected {unexpected})")
    module = build_exported(model_cfg)
    module.load_state_dict(state)
    return module.eval()


def write_export(out: Path, state: dict[str, torch.Tensor], model_cfg: dict, meta: dict) -> Path:
    """Write the three files into `out` (contiguous copies of the tensors); returns `out`.

    The caller decides which tensors belong (the trainer drops its distance head); floating tensors
    are written as fp32, integer ones as they are; a folder that holds anything but an earlier
    export, or an export that read_export would refuse (check_export), is refused before anything
    is written."""
    out = claim_export_dir(out)
    state = {k: (v.detach().float() if v.is_floating_point() else v.detach()).contiguous().clone() for k, v in state.items()}
    meta = {**meta, "parameters": sum(v.numel() for v in state.values()), "tensors_sha256": tensors_sha256(state)}
    check_export(Export(out, model_cfg, state, meta))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"{MODEL_FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    tmp.replace(out / MODEL_FILE)
    atomic_write_text(out / CONFIG_FILE, yaml.safe_dump(model_cfg, sort_keys=False))
    atomic_write_text(out / META_FILE, json.dumps(meta, indent=1))
    return out


def read_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """An export's model.pt (or any weights-only state dict file): name → tensor, nothing that runs code."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such model file (write it with `gtscale export` or `gtscale import-checkpoint`)")
    try:
        state = safe_torch_load(path)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, IndexError, struct.error, zipfile.BadZipFile) as err:
        if what := refused_global(err):
            raise UserError(f"{path}: refused: loading it would run code ({what}); a gtscale export holds tensors only") from err
        raise UserError(f"{path}: not a readable weights-only model file ({describe_load_failure(path, err)}); write it with `gtscale export`") from err
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UserError(f"{path}: expected a mapping of tensor names to tensors, got {type(state).__name__}")
    return state


def read_export(path: str | os.PathLike) -> Export:
    """The export in folder `path` (or the folder of `path`, its model.pt): config, weights, metadata,
    checked (check_export). A missing, malformed or tampered file is a UserError naming it."""
    path = Path(path)
    folder = path.parent if path.name == MODEL_FILE and path.is_file() else path
    if not folder.is_dir():
        raise UserError(f"{folder}: no such export folder (write it with `gtscale export` or `gtscale import-checkpoint`)")
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder}: not a gtscale export (no {', '.join(missing)})")
    try:
        config = yaml.safe_load((folder / CONFIG_FILE).read_text())
        meta = json.loads((folder / META_FILE).read_text())
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{folder}: malformed {CONFIG_FILE} or {META_FILE} ({type(err).__name__}: {err})".replace("\n", " ")) from err
    if not isinstance(config, dict) or not isinstance(meta, dict):
        raise UserError(f"{folder}: {CONFIG_FILE} and {META_FILE} must each hold a mapping")
    config = current_field_names(config, str(folder / CONFIG_FILE))  # an export of any age: fields by their current names
    if isinstance(config.get("backbone"), dict):
        config["backbone"] = current_field_names(config["backbone"], f"{folder / CONFIG_FILE}: backbone")
    export = Export(folder, config, read_weights(folder / MODEL_FILE), meta)
    check_export(export)
    check_tensors_sha256(export)
    return export


def tensors_sha256(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's tensors: each one's name, dtype, shape and bytes, in name order
    (of the tensors, not of model.pt's bytes: a copy or a re-save of the same tensors keeps it)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def check_tensors_sha256(export: Export) -> None:
    """model.pt's tensors are the ones export.json's tensors_sha256 records: a flipped byte changes
    predictions without making any value out of range, so only the checksum finds it (an export
    written before the checksum was kept has none and is read as it is)."""
    recorded = export.meta.get("tensors_sha256")
    if recorded is not None and tensors_sha256(export.state) != recorded:
        raise UserError(f"{export.folder / MODEL_FILE}: its tensors do not match the checksum in {META_FILE} (tensors_sha256): the file "
                        "was damaged or changed since it was written; copy, export or fit it again")


def check_export(export: Export) -> None:
    """model.yaml, export.json and model.pt of an export, each on its own and against each other;
    a UserError naming the file and key (module docstring)."""
    config_file, meta_file = export.folder / CONFIG_FILE, export.folder / META_FILE
    record = _typed(ExportRecord, export.meta, meta_file)
    models = [("", export.config, record)]
    if isinstance(export.config.get("backbone"), dict):  # an export that carries its backbone (the kernel SVR)
        models.append(("backbone.", export.config["backbone"], record.backbone or BackboneRecord()))
    for prefix, model_cfg, described in models:
        head = check_model_config(model_cfg, config_file, prefix) if prefix or is_model(model_cfg) else None
        # a model's outputs are its head's; every other kind of export predicts model.yaml's `outputs`
        # targets (a landmark kernel model's; the SVRs have no key: one target; its reader checks its type)
        declared = model_cfg.get("outputs", 1)
        outputs = head.num_outputs if head is not None else declared if isinstance(declared, int) and not isinstance(declared, bool) else 1
        _check_widths(described, outputs, head, f"{meta_file}: {'backbone.' if prefix else ''}", f"{config_file.name}'s {prefix}head")
    for name, tensor in export.state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise UserError(f"{export.folder / MODEL_FILE}: tensor {name} holds NaN or infinity; the export is damaged (export or fit it again)")


def is_model(model_cfg: dict) -> bool:
    """Whether a model.yaml describes one of gtscale's models (else an SVR member of members/)."""
    return isinstance(model_cfg.get("name"), str) and model_cfg["name"] in MODELS


def check_model_config(model_cfg: dict, file: Path, prefix: str = "") -> HeadConfig:
    """The head of a model config (and the model's own fields) checked against their typed
    configs and ranges; a UserError naming `file` and the key (under `prefix`)."""
    try:
        parse_model_config(model_cfg)
        return from_dict(HeadConfig, model_cfg.get("head", {"kind": "graph"}), prefix="head.")
    except UserError as err:
        raise UserError(f"{file}: {prefix}{err}") from None


def _typed(cls: type, data: dict, file: Path):
    try:
        return from_dict(cls, data)
    except UserError as err:
        raise UserError(f"{file}: {err}") from None


def _check_widths(record: ExportRecord | BackboneRecord, outputs: int, head: HeadConfig | None, where: str, head_key: str) -> None:
    """One target name, shift and scale per output, and the graph features the head was built for."""
    shards, task = record.shards, record.task
    if shards is not None:
        names = shards.task.target_names
        if names is not None and len(names) != outputs:
            raise UserError(f"{where}shards.task.target_names: {len(names)} names for the {outputs} output(s) of {head_key}")
        if shards.task.num_targets is not None and shards.task.num_targets != outputs:
            raise UserError(f"{where}shards.task.num_targets: {shards.task.num_targets} for the {outputs} output(s) of {head_key}")
        graph = shards.features.graph
        if head is not None and head.graph_features != (graph.dim if graph else 0):
            raise UserError(f"{where}shards.features.graph: {graph.dim if graph else 'no'} graph features, but {head_key}.graph_features "
                            f"is {head.graph_features}")
    if task is not None and head is not None and task.loss in REGRESSION_LOSSES:
        for key in ("target_shift", "target_scale"):
            value = getattr(task, key)
            if value == "auto" or (isinstance(value, list) and len(value) != outputs):
                raise UserError(f"{where}task.{key}: {value!r} is not a number or one per output ({outputs}) of {head_key}")


def load_exported(path: str | os.PathLike) -> tuple[ExportedModel, Export]:
    """The export's model, built from its config with its weights loaded, in eval mode."""
    export = read_export(path)
    return check_fits(export.state, export.config, str(export.folder / MODEL_FILE)), export
