"""`gtscale bench shard`: molecules/s of each stage of the sharding path on one core, side by side.

Rows, all on the same molecules (the bundled NCI + WEHI sets, ~15k real molecules):
  rdkit MolFromSmiles     parsing alone: the ceiling for anything that starts from SMILES
  ogb smiles2graph        OGB's reference featurizer alone: the baseline
  gtscale featurize       parse + OGB-identical features
  gtscale structure       spd + pred + degrees + SVD + Laplacian on featurized graphs
  gtscale serialize       .npy + tar bytes of finished records
  gtscale full path       what one sharding worker does (writer.build_shard): all of the above
The stages are timed in interleaved rounds and the median round is reported, because this
machine is noisy; ratios are against smiles2graph from the same rounds.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from gtscale.format import schema
from gtscale.prep.featurize import FeaturizeError, featurize_smiles
from gtscale.prep.sources.bundled import NCI_SMILES, WEHI
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.io import atomic_write_text
from gtscale.format.tario import ShardWriter, sample_key
from gtscale.prep.writer import ShardOptions, ShardTask, build_shard

PCQM4MV2_MOLECULES = 3_746_620


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=6000, help="molecules per round (default 6000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")


def bundled_smiles(limit: int) -> list[str]:
    nci = [line.split()[0] for line in NCI_SMILES.read_text().splitlines()]
    with open(WEHI) as f:
        wehi = [row[0] for row in csv.reader(f)]
    mixed = [s for pair in zip(wehi, nci) for s in pair] + wehi[len(nci) :]  # both sets in every prefix
    return mixed[:limit]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> int:
    from ogb.utils import smiles2graph
    from rdkit import Chem
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # one core per sharding worker, as in the sharder
    smiles = bundled_smiles(args.limit)
    graphs = []
    for s in smiles:
        try:
            graphs.append(featurize_smiles(s))
        except FeaturizeError:
            pass
    valid = [s for s in smiles if Chem.MolFromSmiles(s) is not None]
    options = ShardOptions(structure=StructureOptions(), shard_size=len(smiles))
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.X])) for g in graphs], options.structure)
    records = [{**g, **st, schema.Y: np.zeros(1, np.float32), schema.META: {"idx": i, "num_nodes": len(g[schema.X])}} for i, (g, st) in enumerate(zip(graphs, structures))]
    task = ShardTask("bench", 0, 0, smiles, np.arange(len(smiles)), np.zeros((len(smiles), 1), np.float32))

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "parts").mkdir()

        def serialize():
            with ShardWriter(out / "serialize.tar") as writer:
                for i, record in enumerate(records):
                    writer.write(sample_key(i), record)
                writer.close()

        def featurize_all():
            for s in smiles:
                try:
                    featurize_smiles(s)
                except FeaturizeError:
                    pass

        stages = {
            "rdkit MolFromSmiles": (len(smiles), lambda: [Chem.MolFromSmiles(s) for s in smiles]),
            "ogb smiles2graph": (len(valid), lambda: [smiles2graph(s) for s in valid]),
            "gtscale featurize": (len(smiles), featurize_all),
            "gtscale structure": (len(graphs), lambda: structure_many([(g[schema.EDGE_INDEX], len(g[schema.X])) for g in graphs], options.structure)),
            "gtscale serialize": (len(records), serialize),
            "gtscale full path": (len(smiles), lambda: build_shard(task, out, options, "bench")),
        }
        seconds = {name: [] for name in stages}
        for _ in range(args.rounds):
            for name, (_, fn) in stages.items():
                seconds[name].append(_timed(fn))
    baseline = len(valid) / statistics.median(seconds["ogb smiles2graph"])
    rows = []
    for name, (count, _) in stages.items():
        rate = count / statistics.median(seconds[name])
        rows.append({"stage": name, "molecules": count, "mol_per_s": rate, "vs_smiles2graph": rate / baseline})
    full = rows[-1]["mol_per_s"]
    mean_atoms = float(np.mean([len(g[schema.X]) for g in graphs]))
    result = {
        "molecules": len(smiles),
        "mean_atoms": mean_atoms,
        "rounds": args.rounds,
        "structure": {"svd_rank": options.structure.svd_rank, "lap_k": options.structure.lap_k},
        "rows": rows,
        "full_path_vs_smiles2graph": full / baseline,
        "projected_pcqm4mv2_hours": {str(c): PCQM4MV2_MOLECULES / (full * c) / 3600 for c in (2, 64)},
    }
    print(f"{len(smiles)} molecules (mean {mean_atoms:.1f} atoms), one core, median of {args.rounds} interleaved rounds")
    print(f"{'stage':<22}{'mol/s':>10}{'× smiles2graph':>16}")
    for row in rows:
        print(f"{row['stage']:<22}{row['mol_per_s']:>10.0f}{row['vs_smiles2graph']:>16.2f}")
    for cores, hours in result["projected_pcqm4mv2_hours"].items():
        print(f"projected PCQM4Mv2 ({PCQM4MV2_MOLECULES:,} molecules) on {cores} cores: {hours * 60:.1f} min")
    if args.json_path:
        atomic_write_text(args.json_path, json.dumps(result, indent=1) + "\n")
    return 0
