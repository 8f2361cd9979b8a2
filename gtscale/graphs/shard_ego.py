"""Ego-subgraph shards of a graph store: one record per target node of each split.

A record is the target's ego subgraph (gtscale.graphs.sample: target = node 0) with its continuous
features `node_feat_float`, `edge_index`, the molecular structure keys (spd, pred, degrees,
SVD/Laplacian encodings, from gtscale.prep.structure), `node_id` (global ids), `target_pos` [0]
and `target_y` [label of the target]; meta.idx is the target's global id. Shards are cut from the
sorted target list of each split (shard k: targets [k·S, (k+1)·S)) and written by the driver of
the molecular shards (gtscale.prep.driver: plan.json, tars, parts, then manifest.json by
gtscale.format.manifest.merge_parts) — so a rerun keeps the verified shards of the same
fingerprint and `gtscale inspect --verify` checks them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np

from gtscale.format import schema
from gtscale.format.manifest import merge_parts
from gtscale.graphs.sample import EgoSampler, EgoSubgraph, ego_structures
from gtscale.errors import UserError
from gtscale.graphs.splits import mask_split, node_task_section, ratio_split
from gtscale.graphs.store import MANIFEST, GraphStore
from gtscale.io import sha256_file
from gtscale.prep import driver
from gtscale.prep.driver import ShardRecords, ShardTask
from gtscale.prep.structure import StructureOptions


@dataclass(frozen=True)
class EgoShardOptions:
    structure: StructureOptions = StructureOptions(lap_k=0)
    fanouts: tuple[int, ...] = (16, 16)
    max_nodes: int = 64
    seed: int = 0  # the sampler's priority seed
    shard_size: int = 10_000


@dataclass(eq=False)
class EgoTask(ShardTask):
    """A shard of ego subgraphs: `rows` are its target node ids (int64)."""

    @property
    def targets(self) -> np.ndarray:
        return self.rows


def plan_tasks(splits: dict[str, np.ndarray], shard_size: int) -> list[EgoTask]:
    return driver.plan_tasks(splits, shard_size, lambda split, number, ordinal, chunk: EgoTask(split, number, ordinal, np.asarray(chunk, np.int64)))


def ego_records(store: GraphStore, sampler: EgoSampler, targets: np.ndarray, options: EgoShardOptions) -> list[dict]:
    return subgraph_records(store, sampler.sample(targets), options)


def subgraph_records(store: GraphStore, subgraphs: list[EgoSubgraph], options: EgoShardOptions) -> list[dict]:
    """The records of sampled ego subgraphs (also what the online loader collates)."""
    structures = ego_structures(subgraphs, options.structure)
    if not subgraphs:
        return []
    # One gather per batch, from plain ndarray views of the memory maps (np.memmap's per-index
    # overhead is ~25 µs, as much as a record's structure).
    sizes = [len(sub.nodes) for sub in subgraphs]
    features = np.asarray(store.features)[np.concatenate([sub.nodes for sub in subgraphs])].astype(np.float16)
    features = np.split(features, np.cumsum(sizes[:-1]))
    labels = np.asarray(store.labels)[[sub.target for sub in subgraphs]].astype(np.float32)
    labels[labels < 0] = np.nan
    records = []
    for sub, extra, x, label, n in zip(subgraphs, structures, features, labels, sizes):
        dtype = schema.index_dtype(n)
        records.append({
            schema.NODE_FEAT_FLOAT: x,
            schema.EDGE_INDEX: sub.edge_index.astype(dtype),
            schema.NODE_ID: sub.nodes.astype(np.int64, copy=False),  # the sampler's ids are int64 already
            schema.TARGET_POS: np.zeros(1, dtype),
            schema.TARGET_Y: label.reshape(1),
            schema.META: {"idx": sub.target, "center": 0, "num_nodes": n, "num_edges": int(sub.edge_index.shape[1])},
            **extra,
        })
    return records


def store_records(task: EgoTask, store_path: Path, options: EgoShardOptions) -> ShardRecords:
    """The records of a task's targets, sampled and structured 512 at a time as they are written."""
    store = GraphStore.open(store_path)
    sampler = EgoSampler(store.indptr, store.indices, options.fanouts, options.max_nodes, options.seed)
    batches = (ego_records(store, sampler, task.targets[start : start + 512], options) for start in range(0, len(task.targets), 512))
    return ShardRecords(itertools.chain.from_iterable(batches))


def shard_graph_ego(store_path: Path, splits: dict[str, np.ndarray], split_rule: dict, out_dir: Path, options: EgoShardOptions,
                    workers: int = 1, progress: bool = True) -> dict:
    """Write (or complete) the ego shards of every split's targets; returns the manifest."""
    driver.claim_shard_dir(out_dir, [store_path])
    store = GraphStore.open(store_path)
    graph_sha = sha256_file(Path(store_path) / MANIFEST)  # the manifest holds every file's checksum
    run_fingerprint = hashlib.sha256(json.dumps({"schema": schema.SCHEMA_VERSION, "graph": graph_sha, "split": split_rule,
                                                 "options": asdict(options)}, sort_keys=True).encode()).hexdigest()
    tasks = plan_tasks(splits, options.shard_size)
    fields = {
        "dataset": store.manifest["dataset"],
        "sources": [{"path": str(Path(store_path) / MANIFEST), "sha256": graph_sha, "bytes": (Path(store_path) / MANIFEST).stat().st_size}],
        "transform": {**asdict(options.structure), "fanouts": list(options.fanouts), "max_nodes": options.max_nodes,
                      "sampler_seed": options.seed, "shard_size": options.shard_size, "split": split_rule},
        "task": node_task_section(store.labels, splits),
        "features": {"node_float": store.manifest["num_features"]},
    }
    driver.write_plan(out_dir, run_fingerprint, tasks, {split: len(t) for split, t in splits.items()}, fields)
    driver.run_tasks(tasks, partial(store_records, store_path=Path(store_path), options=options), out_dir, run_fingerprint, workers,
                     progress=progress, desc=f"shard graph-ego {fields['dataset']}", unit="ego")
    return merge_parts(out_dir)


def shard_store_ego(graph: str, out: str, *, fanouts: str = "16,16", max_nodes: int = 64, train_ratio: float = 0.4,
                    mask_column: int | None = None, split_seed: int = 0, sampler_seed: int = 0, svd_rank: int = 8, lap_k: int = 0,
                    shard_size: int = 10_000, workers: int = 1, progress: bool = True) -> dict:
    """The ego shards of the store `graph` in `out` (`gtscale shard graph-ego`): targets split by
    `train_ratio` (stratified, the rest 1:2 valid/test, seeded by `split_seed`) or by column
    `mask_column` of the stored masks; `fanouts` comma-separated per-hop caps. Returns the manifest."""
    try:
        caps = tuple(int(f) for f in fanouts.split(","))
    except ValueError as err:
        raise UserError(f"--fanouts {fanouts!r}: expected comma-separated integers") from err
    if not caps or min(caps) < 1 or not 1 <= max_nodes <= 65535 or shard_size < 1 or workers < 1:
        raise UserError("--fanouts must be ≥ 1 each, --max-nodes in 1..65535, --shard-size and --workers ≥ 1")
    store = GraphStore.open(graph)
    if mask_column is not None:
        splits, rule = mask_split(store.masks, mask_column, graph), {"mask_column": mask_column}
    else:
        splits = ratio_split(store.labels, train_ratio, split_seed)
        rule = {"train_ratio": train_ratio, "split_seed": split_seed}
    options = EgoShardOptions(StructureOptions(svd_rank=svd_rank, lap_k=lap_k), caps, max_nodes, sampler_seed, shard_size)
    return shard_graph_ego(Path(graph), splits, rule, Path(out), options, min(workers, os.cpu_count() or 1), progress)
