"""`gtscale bench loader`: what one loader worker delivers, and what bucketing saves, in one run.

Shards: by default built in a temporary folder from RDKit's bundled NCI molecules, sampled to
PCQM4Mv2's size distribution (1–51 heavy atoms, mean 14.1; `gtscale.bench.molecules.sample_molecules`),
with the sharder's own featurize/structure/write_shard and its default transform (spd, degrees,
SVD r=8, Laplacian k=8); or an existing manifest folder with `--shards DIR`.

Each row runs the training loader in-process (`num_workers: 0`), i.e. exactly the work of one
DataLoader worker: read + checksum + decode + shuffle + batch + collate, timed in steady state
(after one untimed pass that fills the shuffle buffer and the buckets) for at least one pass and
`--seconds`. Rows: the EGT batch (spd, degrees, SVD encoding, targets) and the
Graphormer batch (spd, degrees, targets, path edges up to D hops), each with node-budget
bucketed batches and with fixed-size random batches of the same mean graph count. Padding
efficiency = Σ n_i² / Σ B·N_max² over the batches the row produced.

`--workers N` adds the EGT bucketed row as the training process receives it: through N DataLoader
worker processes (started as training starts them), the batches pickled across, the rate shared
out per worker. What the in-process rows miss is that hand-over; the rate the training process
can be fed at is the row's graphs/s/worker × N.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from gtscale.format import schema
from gtscale.prep.featurize import FeaturizeError, featurize_smiles
from gtscale.prep.sources.bundled import NCI_TPSA
from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.bench.report import claim_json, write_json
from gtscale.format.tario import sample_key, write_shard

TARGETS = {"egt_graphs_per_s": 5000, "path_edges_graphs_per_s": 2000, "padding_efficiency": 0.90}
EGT_KEYS = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.Y]
GRAPHORMER_KEYS = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.Y]


def build_nci_shards(root: Path, count: int, shard_size: int, seed: int) -> Path:
    """A manifest folder of `count` NCI molecules of PCQM4Mv2's size distribution (split 'train')."""
    from gtscale.bench.molecules import PCQM4MV2_MAX_ATOMS, sample_molecules

    tpsa = {}
    for line in NCI_TPSA.read_text().splitlines()[1:]:
        smiles, value = line.rsplit(",", 1)
        tpsa[smiles] = float(value)
    options = StructureOptions()
    graphs = []
    for smiles in sample_molecules(count, seed, PCQM4MV2_MAX_ATOMS):
        try:
            graphs.append((smiles, featurize_smiles(smiles)))
        except FeaturizeError:
            continue
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for _, g in graphs], options)
    samples = []
    for idx, ((smiles, graph), extra) in enumerate(zip(graphs, structures)):
        meta = {"idx": idx, "num_nodes": len(graph[schema.NODE_FEAT]), "num_edges": int(graph[schema.EDGE_INDEX].shape[1])}
        y = np.array([tpsa.get(smiles, np.nan)], dtype=np.float32)
        samples.append((sample_key(idx), {**graph, **extra, schema.Y: y, schema.META: meta}))
    shards = []
    for number, start in enumerate(range(0, len(samples), shard_size)):
        rel = f"train/train-{number:06d}.tar"
        shards.append({"path": rel, **write_shard(root / rel, samples[start : start + shard_size])})
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "dataset": "nci-pcqm-sized",
        "transform": {"spd": options.spd, "degree": options.degree, "svd_rank": options.svd_rank, "lap_k": options.lap_k},
        "task": {"type": "graph_regression", "num_targets": 1, "target_names": ["tpsa"]},
        "features": {"node": list(schema.ATOM_FEATURE_DIMS), "edge": list(schema.BOND_FEATURE_DIMS)},
        "splits": {"train": {"samples": len(samples), "shards": shards, "rejected": {}}},
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


def measure(manifest: dict, split: str, config: LoaderConfig, seconds: float) -> dict:
    """Steady-state graphs/s of a loader (in-process, or through config.num_workers worker
    processes), and the padding of the batches it timed.

    The epoch is made endless and the first pass over the split is not timed: it fills the
    shuffle buffer and the open buckets, a cost paid once per epoch, not per batch."""
    one_pass = len(build_loader(manifest, split, config, train=True, rank=0, world_size=1))
    loader = build_loader(manifest, split, replace(config, epoch_batches=10**9), train=True, rank=0, world_size=1)
    batches = iter(loader)
    for _ in range(one_pass):
        next(batches)
    graphs = count = real_pairs = padded_pairs = 0
    start = time.perf_counter()
    while count < one_pass or time.perf_counter() - start < seconds:
        batch = next(batches)
        sizes = batch.node_mask.sum(dim=1)
        graphs += batch.num_graphs
        count += 1
        real_pairs += int((sizes * sizes).sum())
        padded_pairs += batch.num_graphs * batch.max_graph_nodes**2
    elapsed = time.perf_counter() - start
    return {
        "graphs_per_s": graphs / elapsed,
        "padding_efficiency": real_pairs / padded_pairs,
        "graphs_per_batch": graphs / count,
        "graphs": graphs,
        "seconds": elapsed,
    }


def _rows(manifest: dict, split: str, node_budget: int, seed: int, max_dist: int, seconds: float, workers: int) -> list[dict]:
    base = LoaderConfig(num_workers=0, node_budget=node_budget, seed=seed)
    rows = []
    for name, keys, hops in (("EGT", EGT_KEYS, 0), (f"Graphormer (D={max_dist})", GRAPHORMER_KEYS, max_dist)):
        bucketed = replace(base, keys=keys, path_edges_max_dist=hops)
        result = measure(manifest, split, bucketed, seconds)
        rows.append({"batch": name, "batching": f"node budget {node_budget}, bucketed", **result})
        per_batch = max(1, round(result["graphs_per_batch"]))
        fixed = replace(bucketed, batching="graphs", batch_size=per_batch, bucketing=False)
        rows.append({"batch": name, "batching": f"{per_batch} graphs, random", **measure(manifest, split, fixed, seconds)})
    if workers:
        config = replace(base, keys=EGT_KEYS, num_workers=workers)
        result = measure(manifest, split, config, seconds)
        per_worker = {**result, "graphs_per_s": result["graphs_per_s"] / workers, "total_graphs_per_s": result["graphs_per_s"]}
        rows.append({"batch": "EGT", "batching": f"node budget {node_budget}, bucketed, {workers} worker process(es)", **per_worker})
    return rows


def _print(setup: dict, rows: list[dict]) -> None:
    print(
        f"shards: {setup['shards']} ({setup['samples']} graphs, {setup['num_shards']} shards, nodes mean {setup['nodes_mean']:.1f} max {setup['nodes_max']}); "
        f"one worker (in-process) unless the row says otherwise, at least {setup['seconds']:g} s per row"
    )
    print(f"{'batch':<18}{'batching':<48}{'graphs/s/worker':>16}{'padding eff.':>14}{'graphs/batch':>14}")
    for r in rows:
        print(f"{r['batch']:<18}{r['batching']:<48}{r['graphs_per_s']:>16,.0f}{r['padding_efficiency']:>14.3f}{r['graphs_per_batch']:>14.1f}")
    print(
        f"targets: >= {TARGETS['egt_graphs_per_s']:,} graphs/s/worker (EGT), >= {TARGETS['path_edges_graphs_per_s']:,} with path edges, "
        f"padding efficiency >= {TARGETS['padding_efficiency']:.2f} with bucketing"
    )


def _node_counts(manifest: dict, split: str) -> list[int]:
    from gtscale.format.decode import decode_array
    from gtscale.format.shardfile import iter_samples, manifest_shards, read_shard

    return [
        decode_array(members[f"{schema.NODE_FEAT}.npy"], f"{schema.NODE_FEAT}.npy").shape[0]
        for entry in manifest_shards(manifest, split)
        for _, members in iter_samples(read_shard(entry, verify=False), entry.name, entry.schema_version)
    ]


def bench_loader(*, shards: Path | None = None, split: str = "train", molecules: int = 3000, shard_size: int = 500, node_budget: int = 4096,
                 max_dist: int = 5, seconds: float = 2.0, workers: int = 0, seed: int = 0, json_path: Path | None = None) -> int:
    """Decode + collate graphs/s of `shards` (default: `molecules` NCI molecules sharded into a
    temporary folder) per batching, and padding efficiency."""
    if molecules < 1 or shard_size < 1 or node_budget < 1 or max_dist < 1 or seconds <= 0:
        raise UserError("--molecules, --shard-size, --node-budget, --max-dist and --seconds must be positive")
    if workers < 0:
        raise UserError("--workers must be >= 0")
    claim_json(json_path)
    with tempfile.TemporaryDirectory(prefix="gtscale-bench-loader-") as tmp:
        root = shards if shards is not None else build_nci_shards(Path(tmp), molecules, shard_size, seed)
        manifest = load_manifest(root)
        sizes = _node_counts(manifest, split)
        setup = {
            "shards": str(shards) if shards is not None else f"built: NCI sampled to PCQM4Mv2 sizes (seed {seed})",
            "samples": len(sizes),
            "num_shards": len(manifest["splits"][split]["shards"]),
            "nodes_mean": float(np.mean(sizes)),
            "nodes_max": int(np.max(sizes)),
            "seconds": seconds,
        }
        rows = _rows(manifest, split, node_budget, seed, max_dist, seconds, workers)
    _print(setup, rows)
    write_json(json_path, {"setup": setup, "rows": rows, "targets": TARGETS}, "loader", indent=2)
    return 0
