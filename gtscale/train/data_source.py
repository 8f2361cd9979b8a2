"""Where a run's samples come from: shards (`data.shards`, the streaming shard loader) or a graph
store sampled online (`data.graph`: node tasks on random node-induced subgraphs as EdgeBatches,
gtscale.graphs.induced, on fan-out neighbourhoods of the targets as EdgeBatches,
gtscale.graphs.fanout, or on each target's ego subgraph as Batches, gtscale.graphs.online). The
trainer and `gtscale evaluate` ask this module, not the loaders."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import load_manifest
from gtscale.loader.config import LoaderConfig
from gtscale.train.config import DataConfig, GraphDataConfig
from gtscale.train.distributed_eval import target_predictions


def task_manifest(data: DataConfig) -> dict:
    """The shards' manifest, or for a graph store the same keys the trainer reads (task type, label
    counts per split, feature width, splits)."""
    if data.graph is None:
        path = Path(data.shards) / "manifest.json"
        if not path.is_file():
            raise UserError(f"data.shards: {path} not found (run `gtscale shard` first)")
        return load_manifest(path)
    from gtscale.graphs.induced import graph_task_manifest
    from gtscale.graphs.store import GraphStore

    return graph_task_manifest(GraphStore.open(data.graph.store), split_nodes(data.graph))


def split_nodes(graph: GraphDataConfig) -> dict[str, np.ndarray]:
    """train / val / test node ids of the store (computed once per process: the config check and
    the trainer both ask)."""
    return _split_nodes(graph.store, graph.train_ratio, graph.split_seed, graph.mask_column)


@functools.lru_cache(maxsize=4)
def _split_nodes(store: str, train_ratio: float, split_seed: int, mask_column: int | None) -> dict[str, np.ndarray]:
    from gtscale.graphs.induced import graph_splits
    from gtscale.graphs.store import GraphStore

    return graph_splits(GraphStore.open(store), train_ratio, split_seed, mask_column)


def split_loader(data: DataConfig, manifest: dict, split: str, loader: LoaderConfig, *, train: bool, rank: int, world_size: int):
    """The loader of one split: batches (shards), or from a graph store EdgeBatches of induced
    subgraphs (sampler induced) or of fan-out neighbourhoods (sampler fanout), or batches of the
    split's ego subgraphs (sampler ego)."""
    if data.graph is None:
        from gtscale.loader.stream import build_loader

        return build_loader(manifest, split, loader, train=train, rank=rank, world_size=world_size)
    graph = data.graph
    nodes = split_nodes(graph)[split]
    if graph.sampler == "ego":
        from gtscale.graphs.online import build_online_loader, ego_options

        options = ego_options(graph.fanouts, graph.max_nodes, graph.sampler_seed, graph.svd_rank, graph.lap_k)
        return build_online_loader(graph.store, nodes, options, loader, train=train, rank=rank, world_size=world_size)
    if graph.sampler == "fanout":
        from gtscale.graphs.fanout import build_fanout_loader

        return build_fanout_loader(graph.store, nodes, graph.fanouts, graph.batch_targets, loader, train=train, rank=rank, world_size=world_size)
    from gtscale.graphs.induced import build_induced_loader

    return build_induced_loader(graph.store, nodes, graph.fraction, loader, train=train, rank=rank, world_size=world_size)


def split_features(data: DataConfig, manifest: dict, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(features [n, F], 0/1 labels [n]) of a node split's labelled targets, for the features-only
    baseline: read from the shards' target nodes, or straight from the store."""
    if data.graph is None:
        return target_features(manifest, split)
    from gtscale.graphs.store import GraphStore

    store = GraphStore.open(data.graph.store)
    nodes = split_nodes(data.graph)[split]
    labels = np.asarray(store.labels[nodes], np.int64)
    known = labels >= 0
    return np.asarray(store.features[nodes[known]], np.float32), labels[known]


def target_features(manifest: dict, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(features [n, F], labels [n]) of a split's labelled targets, read from the shards (the target
    node's node_feat_float, as the model sees it): one pass over the split in this process."""
    from gtscale.loader.stream import build_loader

    config = LoaderConfig(batching="graphs", batch_size=256, bucketing=False, num_workers=0, keys=[schema.TARGET_Y], sign_flip=False)
    features, labels = [], []
    for batch in build_loader(manifest, split, config, train=False, rank=0, world_size=1):
        _, values = target_predictions(batch, batch.node_feat_float)
        keep = batch.target_y_mask.reshape(-1)
        features.append(values[keep].numpy())
        labels.append(batch.target_y.reshape(-1)[keep].numpy())
    return np.concatenate(features), np.concatenate(labels).astype(np.int64)
