"""Shards and a manifest built from RDKit's bundled NCI molecules, for the loader tests.

Records are made with the sharder's own pieces (featurize_smiles, structure, write_shard), so the
loader is tested on exactly what the sharder writes. Shards are deliberately uneven in size and
count so that no split divides evenly among ranks and workers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rdkit import RDConfig

from gtscale.format import schema
from gtscale.format.target_stats import TARGET_STATS, split_target_stats
from gtscale.prep.featurize import FeaturizeError, featurize_smiles
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.format.tario import sample_key, write_shard

NCI_TPSA = Path(RDConfig.RDDataDir) / "NCI" / "first_5k.tpsa.csv"
OPTIONS = StructureOptions(spd=True, degree=True, svd_rank=4, lap_k=4)
#: Samples per shard of each split: uneven, and not divisible by 2 ranks x 2 workers.
SHARD_SIZES = {"train": [70, 50, 90, 30, 25], "valid": [45, 20, 35, 9, 11], "test": [13]}


def nci_records(count: int, max_nodes: int = 51, options: StructureOptions = OPTIONS) -> list[tuple[int, dict]]:
    """(idx, record) for the first `count` NCI molecules with at most `max_nodes` atoms.

    y = [TPSA, a second target that is NaN for every third molecule]; node_y = per-atom
    atomic-number features as floats with NaN on every fifth atom (to exercise node masks)."""
    rows = [line.strip().rsplit(",", 1) for line in NCI_TPSA.read_text().splitlines() if line and not line.startswith("#")]
    graphs = []
    for idx, (smiles, tpsa) in enumerate(rows):
        try:
            graph = featurize_smiles(smiles)
        except FeaturizeError:
            continue
        if len(graph[schema.NODE_FEAT]) > max_nodes:
            continue
        graphs.append((idx, graph, float(tpsa)))
        if len(graphs) == count:
            break
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for _, g, _ in graphs], options)
    records = []
    for (idx, graph, tpsa), extra in zip(graphs, structures):
        n = len(graph[schema.NODE_FEAT])
        node_y = graph[schema.NODE_FEAT][:, 0].astype(np.float32)
        node_y[::5] = np.nan
        record = {
            **graph,
            **extra,
            schema.Y: np.array([tpsa, np.nan if idx % 3 == 0 else tpsa / 10], dtype=np.float32),
            schema.NODE_Y: node_y,
            schema.META: {"idx": idx, "num_nodes": n, "num_edges": int(graph[schema.EDGE_INDEX].shape[1])},
        }
        records.append((idx, record))
    return records


def write_dataset(root: Path, records: list[tuple[int, dict]], shard_sizes: dict[str, list[int]], options: StructureOptions = OPTIONS) -> Path:
    """Write shards of the given sizes per split (records dealt out in order) and manifest.json."""
    root.mkdir(parents=True, exist_ok=True)
    splits, targets, start = {}, {}, 0
    for split, sizes in shard_sizes.items():
        shards = []
        for number, size in enumerate(sizes):
            chunk = records[start : start + size]
            assert len(chunk) == size, "not enough molecules for the requested shards"
            start += size
            rel = f"{split}/{split}-{number:06d}.tar"
            stats = write_shard(root / rel, [(sample_key(idx), record) for idx, record in chunk])
            shards.append({"path": rel, **stats, "max_nodes": max(len(r[schema.NODE_FEAT]) for _, r in chunk)})
        splits[split] = {"samples": sum(s["samples"] for s in shards), "shards": shards, "rejected": {}}
        targets[split] = np.stack([record[schema.Y].reshape(-1) for _, record in records[start - sum(sizes) : start]])
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "dataset": "nci-tpsa",
        "transform": {"spd": options.spd, "degree": options.degree, "svd_rank": options.svd_rank, "lap_k": options.lap_k},
        "task": {"type": "graph_regression", "num_targets": 2, "target_names": ["tpsa", "tpsa_tenth"],
                 TARGET_STATS: split_target_stats(targets)},
        "features": {"node": list(schema.ATOM_FEATURE_DIMS), "edge": list(schema.BOND_FEATURE_DIMS)},
        "splits": splits,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root
