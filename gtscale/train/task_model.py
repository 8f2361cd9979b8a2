"""The module DeepSpeed wraps: backbone + task head (+ EGT's distance head), and how it is built,
initialised from an export (pretrain → fine-tune) and told which Batch fields to ask the loader for."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from gtscale.config import from_dict, to_dict
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import is_node_task
from gtscale.loader.batch import Batch
from gtscale.models.config import HeadConfig
from gtscale.models.export import ExportedModel, read_weights
from gtscale.models.heads import head_input_dim
from gtscale.train.config import ResolvedConfig, TrainConfig, resolve_model_config
from gtscale.train.feature_targets import FeatureTargets


class GraphTaskModel(ExportedModel):
    """Backbone + task head (+ the training-only heads of auxiliary objectives: EGT's distance
    head, the molecule-feature head of task.aux_graph_feat) as one module, so DeepSpeed wraps (and
    ZeRO partitions) them all. Its state dict less the auxiliary heads (AUX_HEADS) is an export's.

    forward returns (task scores, {objective: its unweighted-by-batch loss}); the auxiliary losses
    are computed in training mode only."""

    def __init__(self, backbone: nn.Module, head: nn.Module, distance_head: nn.Module | None = None,
                 feature_head: nn.Module | None = None, feature_targets: FeatureTargets | None = None):
        super().__init__(backbone, head)
        self.distance_head = distance_head
        self.feature_head = feature_head
        self.feature_targets = feature_targets

    def forward(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        outputs = self.backbone(batch)
        aux = {}
        if self.training and self.distance_head is not None:
            aux["distance"] = self.distance_head.distance_loss(self.distance_head(outputs), batch)
        if self.training and self.feature_head is not None:
            aux["graph_feat"] = self.feature_targets.loss(self.feature_head(outputs), batch.graph_feat, batch.node_mask.any(dim=1))
        # graph_feat is an input only when it is not a target (EdgeBatches carry none)
        graph_feat = None if self.feature_head is not None else getattr(batch, "graph_feat", None)
        return self.head(outputs, graph_feat), aux


#: State-dict prefixes of the heads that only shape training: an export leaves them out.
AUX_HEADS = ("distance_head.", "feature_head.")


def task_model_config(cfg: TrainConfig, manifest: dict | None = None) -> dict:
    """The model config with what the shards decide: for node shards, node_float_dim from the
    manifest's features (where the model config leaves it 0) and a node head (scores per node,
    read at the target nodes by the trainer); for shards with molecule-level features
    (`gtscale shard --graph-features`), the head's graph_features width."""
    model_cfg = resolve_model_config(cfg)
    graph_dim = int((manifest or {}).get("features", {}).get("graph", {}).get("dim", 0))
    if graph_dim and cfg.task.aux_graph_feat is None:  # as targets (aux_graph_feat) they are no input
        model_cfg["head"] = {**model_cfg.get("head", {}), "graph_features": graph_dim}
    if is_node_task(manifest):
        if not model_cfg.get("node_float_dim"):
            model_cfg["node_float_dim"] = int(manifest.get("features", {}).get("node_float", 0))
        model_cfg["head"] = {**model_cfg.get("head", {}), "kind": "node"}
    return model_cfg


def build_task_model(resolved: ResolvedConfig, manifest: dict | None = None) -> GraphTaskModel:
    """The backbone of the resolved model config, its task head (ResolvedConfig.head: a node head
    on node shards) and EGT's distance head when task.aux_distance is set, the molecule-feature
    head (as wide as the manifest's graph features) when task.aux_graph_feat is. A head the
    backbone cannot carry is a UserError naming task.head or task.aux_distance."""
    from gtscale.models import build_head, build_model

    task = resolved.train.task
    backbone = build_model(resolved.model)
    head_cfg = from_dict(HeadConfig, resolved.head, prefix="task.head.")
    _check_fits(head_cfg, backbone, "task.head.kind")
    distance_head = None
    if task.aux_distance is not None:  # EGT's auxiliary objective (needs output_edges: true)
        distance_cfg = HeadConfig(kind="distance", **to_dict(task.aux_distance))
        _check_fits(distance_cfg, backbone, "task.aux_distance")
        distance_head = build_head(distance_cfg, backbone)
    feature_head, feature_targets = None, None
    if task.aux_graph_feat is not None:  # a graph head as wide as graph_feat, the task head's hidden layers
        feature_targets = FeatureTargets.from_manifest(manifest or {}, str((manifest or {}).get("_dir", "the shards")))
        feature_head = build_head(dataclasses.replace(head_cfg, num_outputs=feature_targets.dim, graph_features=0), backbone)
    return GraphTaskModel(backbone, build_head(head_cfg, backbone), distance_head, feature_head, feature_targets)


def _check_fits(head_cfg: HeadConfig, backbone: nn.Module, key: str) -> None:
    try:
        head_input_dim(head_cfg, backbone)
    except ValueError as err:
        raise UserError(f"{key}: {err}") from None


def check_task_model(resolved: ResolvedConfig, manifest: dict | None = None) -> None:
    """Build the task model on the meta device (shapes only, no memory, no initialisation cost), so
    that task.head and task.aux_distance are checked with the rest of the config, before any
    process group starts; and that a model sampled a graph store (data.graph) takes what the
    sampler gives: EdgeBatches (induced, fanout) or padded Batches (ego), and full-graph
    inference a model with a layer-wise form."""
    with torch.device("meta"):
        model = build_task_model(resolved, manifest)
    model_cfg = resolved.model
    graph, takes_edges = resolved.train.data.graph, getattr(model.backbone, "takes_edge_batch", False)
    if graph is not None and graph.sampler in ("induced", "fanout") and not takes_edges:
        raise UserError(f"model: {model_cfg.get('name')!r} takes padded dense batches; data.graph (sampler {graph.sampler}) "
                        "gives edge lists of subgraphs: use the sparse ET (form: sparse) or MNA-GT, or data.graph.sampler: ego")
    if graph is not None and graph.sampler == "ego" and takes_edges:
        raise UserError(f"model: {model_cfg.get('name')!r} takes edge lists; data.graph (sampler ego) gives padded dense batches "
                        "of ego subgraphs: use data.graph.sampler: induced or fanout, or a dense model (EGT, Graphormer)")
    for key, inference in (("data.graph.inference", graph and graph.inference), ("eval.inference", resolved.train.eval.inference)):
        if inference == "full" and not hasattr(model.backbone, "layerwise"):
            raise UserError(f"{key}: full needs a model that attends along edges one layer at a time (the sparse ET); "
                            f"{model_cfg.get('name')!r} does not: use {key}: sampled")


def load_backbone(model: GraphTaskModel, path: str) -> int:
    """Start from an exported model's backbone (pretrain → fine-tune); the task head stays new.

    Prints (rank 0) how many tensors were loaded, newly initialised (the task head, EGT's distance
    head) and dropped (the export's own head). A backbone tensor missing from the file, one the
    model lacks, or one of another shape is a UserError naming the key (and both shapes).
    The file is read with weights_only=True: tensors only, nothing in it can run code."""
    try:
        state = read_weights(path)
    except UserError as err:
        raise UserError(f"init_from: {err}") from err
    backbone = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
    own = model.backbone.state_dict()
    for key, value in backbone.items():
        if key in own and tuple(value.shape) != tuple(own[key].shape):
            raise UserError(f"init_from: {path}: backbone.{key} has shape {tuple(value.shape)} in the file but {tuple(own[key].shape)} in this model (a different model config?)")
    missing, unexpected = sorted(set(own) - set(backbone)), sorted(set(backbone) - set(own))
    if missing or unexpected:
        kind, keys = ("missing from the file", missing) if missing else ("not in this model", unexpected)
        more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
        raise UserError(f"init_from: {path} does not fit this model: backbone.{keys[0]}{more} {kind}")
    model.backbone.load_state_dict(backbone, strict=True)
    new = [k for k in model.state_dict() if not k.startswith("backbone.")]
    dropped = [k for k in state if not k.startswith("backbone.")]
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0:
        print(f"init_from {path}: loaded {len(backbone)} backbone tensors; newly initialised {len(new)} ({_names(new)}); "
              f"dropped {len(dropped)} from the file ({_names(dropped)})", flush=True)
    return len(backbone)


def _names(keys: list[str], limit: int = 6) -> str:
    """A short listing of tensor names for a log line."""
    if not keys:
        return "none"
    return ", ".join(keys[:limit]) + (f", … {len(keys) - limit} more" if len(keys) > limit else "")


def loader_keys(backbone: nn.Module, model_cfg: dict, target_key: str = schema.Y, feature_targets: bool = False) -> tuple[list[str], int]:
    """Optional Batch fields the model reads (+ the task's targets, Task.target_key: y for graph
    shards, target_y for node shards; + graph_feat when `feature_targets`), and the path-edge
    distance it needs."""
    from gtscale.loader.collate import BATCH_KEYS

    fields = [f for f in backbone.batch_fields if f in BATCH_KEYS and f != "path_edges"]
    if model_cfg.get("head", {}).get("graph_features") or feature_targets:
        fields.append(schema.GRAPH_FEAT)
    path_dist = int(model_cfg.get("multi_hop_max_dist", 0)) if "path_edges" in backbone.batch_fields else 0
    return sorted(set(fields) | {target_key}), path_dist

