"""Ego-subgraph shards of a graph store: one record per target node of each split.

A record (schema v2) is the target's ego subgraph (gtscale.graphs.sample: target = node 0) with
its continuous features `x_float`, `edge_index`, the molecular structure keys (spd, pred, degrees,
SVD/Laplacian encodings, from gtscale.prep.structure), `node_id` (global ids), `target_nodes` [0]
and `target_y` [label of the target]; meta.idx is the target's global id. Shards are cut from the
sorted target list of each split (shard k: targets [k·S, (k+1)·S)) and written like the molecular
shards: tar via gtscale.format.tario, parts/<shard>.json after it, plan.json first and
manifest.json assembled by gtscale.format.manifest.merge_parts — so a rerun keeps the verified
shards of the same fingerprint and `gtscale inspect --verify` checks them.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gtscale import __version__
from gtscale.format import schema
from gtscale.format.manifest import PARTS_DIR, PLAN_FILE, merge_parts
from gtscale.format.tario import ShardWriter, sample_key
from gtscale.graphs.sample import EgoSampler, EgoSubgraph, ego_structures
from gtscale.graphs.splits import node_task_section
from gtscale.graphs.store import MANIFEST, GraphStore
from gtscale.io import atomic_write_text, sha256_file
from gtscale.prep.structure import StructureOptions
from gtscale.prep.writer import is_complete


@dataclass(frozen=True)
class EgoShardOptions:
    structure: StructureOptions = StructureOptions(lap_k=0)
    fanouts: tuple[int, ...] = (16, 16)
    max_nodes: int = 64
    seed: int = 0  # the sampler's priority seed
    shard_size: int = 10_000


@dataclass
class EgoTask:
    split: str
    number: int
    ordinal: int
    targets: np.ndarray

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:06d}"

    @property
    def relpath(self) -> str:
        return f"{self.split}/{self.name}.tar"


def plan_tasks(splits: dict[str, np.ndarray], shard_size: int) -> list[EgoTask]:
    tasks = []
    for split, targets in splits.items():
        for number, start in enumerate(range(0, len(targets), shard_size)):
            tasks.append(EgoTask(split, number, len(tasks), np.asarray(targets[start : start + shard_size], np.int64)))
    return tasks


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
            schema.X_FLOAT: x,
            schema.EDGE_INDEX: sub.edge_index.astype(dtype),
            schema.NODE_ID: sub.nodes.astype(np.int64, copy=False),  # the sampler's ids are int64 already
            schema.TARGET_NODES: np.zeros(1, dtype),
            schema.TARGET_Y: label.reshape(1),
            schema.META: {"idx": sub.target, "center": 0, "num_nodes": n, "num_edges": int(sub.edge_index.shape[1])},
            **extra,
        })
    return records


def build_shard(task: EgoTask, store_path: Path, out_dir: Path, options: EgoShardOptions, run_fingerprint: str) -> dict:
    store = GraphStore.open(store_path)
    sampler = EgoSampler(store.indptr, store.indices, options.fanouts, options.max_nodes, options.seed)
    with ShardWriter(out_dir / task.relpath) as writer:
        max_nodes = 0
        for start in range(0, len(task.targets), 512):
            for record in ego_records(store, sampler, task.targets[start : start + 512], options):
                writer.write(sample_key(record[schema.META]["idx"]), record)
                max_nodes = max(max_nodes, record[schema.META]["num_nodes"])
        stats = writer.close()
    part = {"fingerprint": run_fingerprint, "split": task.split, "number": task.number, "path": task.relpath, **stats,
            "max_nodes": max_nodes, "rejected": {}, "rejects": []}
    atomic_write_text(out_dir / PARTS_DIR / f"{task.name}.json", json.dumps(part, sort_keys=True))
    return part


def _run(payload) -> tuple[int, dict]:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # one BLAS thread per worker
    return len(payload[0].targets), build_shard(*payload)


def shard_graph_ego(store_path: Path, splits: dict[str, np.ndarray], split_rule: dict, out_dir: Path, options: EgoShardOptions,
                    workers: int = 1, progress: bool = True) -> dict:
    """Write (or complete) the ego shards of every split's targets; returns the manifest."""
    store = GraphStore.open(store_path)
    graph_sha = sha256_file(Path(store_path) / MANIFEST)  # the manifest holds every file's checksum
    run_fingerprint = hashlib.sha256(json.dumps({"schema": schema.SCHEMA_VERSION, "graph": graph_sha, "split": split_rule,
                                                 "options": asdict(options)}, sort_keys=True).encode()).hexdigest()
    tasks = plan_tasks(splits, options.shard_size)
    (out_dir / PARTS_DIR).mkdir(parents=True, exist_ok=True)
    plan = {
        "fingerprint": run_fingerprint,
        "created_by": f"gtscale {__version__}",
        "schema_version": schema.SCHEMA_VERSION,
        "dataset": store.manifest["dataset"],
        "sources": [{"path": str(Path(store_path) / MANIFEST), "sha256": graph_sha, "bytes": (Path(store_path) / MANIFEST).stat().st_size}],
        "transform": {**asdict(options.structure), "fanouts": list(options.fanouts), "max_nodes": options.max_nodes,
                      "sampler_seed": options.seed, "shard_size": options.shard_size, "split": split_rule},
        "task": node_task_section(store.labels, splits),
        "features": {"node_float": store.manifest["num_features"]},
        "splits": {split: {"rows": int(len(t)), "shards": [k.name for k in tasks if k.split == split]} for split, t in splits.items()},
    }
    atomic_write_text(out_dir / PLAN_FILE, json.dumps(plan, indent=1, sort_keys=True))
    pending = [t for t in tasks if not is_complete(t, out_dir, run_fingerprint)]
    payloads = [(t, Path(store_path), out_dir, options, run_fingerprint) for t in pending]
    bar = tqdm(total=sum(len(t.targets) for t in pending), unit="ego", desc=f"shard graph-ego {plan['dataset']}", disable=not progress)
    pool = mp.get_context("fork").Pool(workers) if workers > 1 and len(payloads) > 1 else None
    try:
        for count, _ in (pool.imap_unordered(_run, payloads) if pool else map(_run, payloads)):
            bar.update(count)
    finally:
        bar.close()
        if pool:
            pool.terminate()
    return merge_parts(out_dir)
