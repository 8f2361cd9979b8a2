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

`--whole-process N` measures instead what a user's command costs, start-up included: a
PCQM4Mv2-layout folder of N bundled molecules (raw/data.csv.gz + split_dict.pt, as OGB-LSC ships
it) is sharded by `gtscale shard pcqm4mv2 --workers 1` in a fresh process, against a fresh process
that reads the same file with pandas and runs smiles2graph on every molecule. Both wall-clock and
CPU seconds (user + system of the child) are reported; CPU seconds are the steadier figure on a
shared machine. Each process also runs on STARTUP_MOLECULES molecules, in the same rounds, which
splits its CPU seconds into start-up (imports, reading, writing the manifest: what does not grow
with the dataset) and CPU milliseconds per further molecule.
"""

from __future__ import annotations

import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gtscale.format import schema
from gtscale.prep.featurize import FeaturizeError, featurize_smiles
from gtscale.prep.sources.bundled import NCI_SMILES, WEHI
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.format.tario import ShardWriter, sample_key
from gtscale.bench.report import claim_json, write_json
from gtscale.prep.writer import MoleculeTask, ShardOptions, build_shard

PCQM4MV2_MOLECULES = 3_746_620
#: Molecules of the small run that measures each process's start-up cost (--whole-process).
STARTUP_MOLECULES = 100


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


#: The baseline process: OGB's reference featurizer over the same CSV, nothing else.
_SMILES2GRAPH_PROCESS = """
import sys
import pandas as pd
from ogb.utils import smiles2graph
from rdkit import RDLogger
RDLogger.DisableLog("rdApp.*")
graphs = 0
for s in pd.read_csv(sys.argv[1])["smiles"]:
    try:
        smiles2graph(s)
        graphs += 1
    except AttributeError:  # smiles2graph's failure on SMILES RDKit cannot parse
        pass
"""


def write_pcqm4mv2_layout(root: Path, count: int) -> Path:
    """<root>/pcqm4m-v2/{raw/data.csv.gz, split_dict.pt} with `count` bundled molecules (repeated
    as needed), split 80/10/5/5 with hidden test labels, as OGB-LSC ships PCQM4Mv2."""
    import pandas as pd
    import torch

    pool = bundled_smiles(15_000)
    smiles = [pool[i % len(pool)] for i in range(count)]
    rng = np.random.default_rng(0)
    order = rng.permutation(count)
    cuts = [0, count * 8 // 10, count * 9 // 10, count * 19 // 20, count]
    names = ["train", "valid", "test-dev", "test-challenge"]
    splits = {name: np.sort(order[a:b]).astype(np.int64) for name, a, b in zip(names, cuts, cuts[1:])}
    gap = rng.uniform(1, 10, count)
    gap[np.concatenate([splits["test-dev"], splits["test-challenge"]])] = np.nan
    folder = root / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True)
    pd.DataFrame({"idx": np.arange(count), "smiles": smiles, "homolumogap": gap}).to_csv(folder / "raw" / "data.csv.gz", index=False)
    torch.save(splits, folder / "split_dict.pt")
    return folder


def _time_process(argv: list[str], cwd: str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one process run to completion in `cwd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ | {"OMP_NUM_THREADS": "1"}, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _commands(root: Path, out: str, trees: list[str] = ()) -> dict[str, tuple[list[str], str | None]]:
    """name → (argv, folder to run in): the baseline, this gtscale, and gtscale from each of `trees`
    (run in the tree: `python -m` puts the working folder first on sys.path, before PYTHONPATH)."""
    csv_path = root / "pcqm4m-v2" / "raw" / "data.csv.gz"
    shard = [sys.executable, "-m", "gtscale.cli", "shard", "pcqm4mv2", "--root", str(root), "--workers", "1"]
    commands = {
        "smiles2graph process": ([sys.executable, "-c", _SMILES2GRAPH_PROCESS, str(csv_path)], None),
        "gtscale shard process": ([*shard, "--out", out], None),
    }
    for number, tree in enumerate(trees):
        commands[f"gtscale shard process from {tree}"] = ([*shard, "--out", f"{out}-tree{number}"], str(Path(tree).resolve()))
    return commands


def bench_shard_processes(count: int, *, rounds: int = 3, json_path: str | None = None, trees: list[str] = ()) -> int:
    """`gtscale shard pcqm4mv2 --workers 1` against a smiles2graph process, whole processes on `count`
    molecules (also `gtscale shard` of each gtscale checkout in `trees`), median of `rounds`."""
    small = min(STARTUP_MOLECULES, count)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_pcqm4mv2_layout(tmp / "root", count)
        write_pcqm4mv2_layout(tmp / "small", small)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in _commands(tmp, "", trees)}
        startup: dict[str, list[float]] = {name: [] for name in times}
        for round_ in range(rounds):
            for name, (argv, cwd) in _commands(tmp / "root", str(tmp / f"out{round_}"), trees).items():
                times[name].append(_time_process(argv, cwd))
            for name, (argv, cwd) in _commands(tmp / "small", str(tmp / f"small{round_}"), trees).items():
                startup[name].append(_time_process(argv, cwd)[1])
    rows = []
    for name, samples in times.items():
        wall, cpu = statistics.median(t[0] for t in samples), statistics.median(t[1] for t in samples)
        fixed = statistics.median(startup[name])
        per_molecule = (cpu - fixed) / (count - small) if count > small else float("nan")
        rows.append({"process": name, "wall_s": wall, "cpu_s": cpu, "mol_per_s_wall": count / wall, "mol_per_s_cpu": count / cpu,
                     f"cpu_s_{small}_molecules": fixed, "cpu_ms_per_further_molecule": 1e3 * per_molecule})
    base, ours = rows[:2]
    for row in rows[1:]:
        row["ratio_cpu"] = base["cpu_s"] / row["cpu_s"]  # smiles2graph ÷ this process: ≥ 1 is as cheap as smiles2graph
    result = {"molecules": count, "startup_molecules": small, "rounds": rounds, "rows": rows,
              "ratio_wall": base["wall_s"] / ours["wall_s"], "ratio_cpu": base["cpu_s"] / ours["cpu_s"],
              "load_average": os.getloadavg()[0]}
    print(f"{count} molecules, whole processes started afresh, median of {rounds} interleaved rounds (load average {result['load_average']:.1f})")
    print(f"{'process':<24}{'wall s':>9}{'CPU s':>9}{'mol/s (CPU)':>13}{f'CPU s, {small} mol':>16}{'CPU ms/further mol':>20}{'s2g CPU ÷ this':>16}")
    for row in rows:
        print(f"{row['process']:<24}{row['wall_s']:>9.1f}{row['cpu_s']:>9.1f}{row['mol_per_s_cpu']:>13.0f}"
              f"{row[f'cpu_s_{small}_molecules']:>16.2f}{row['cpu_ms_per_further_molecule']:>20.3f}{row.get('ratio_cpu', 1.0):>16.2f}")
    print(f"gtscale shard / smiles2graph speed: {result['ratio_cpu']:.2f}x by CPU time, {result['ratio_wall']:.2f}x by wall clock")
    write_json(json_path, result, "shard")
    return 0


def bench_shard(*, limit: int = 6000, rounds: int = 3, json_path: str | None = None, whole_process: int = 0, also_tree: list[str] = ()) -> int:
    """Featurization + structure + serialization throughput on `limit` bundled molecules against
    smiles2graph, median of `rounds`; with `whole_process`, bench_shard_processes instead."""
    claim_json(json_path)
    if whole_process:
        return bench_shard_processes(whole_process, rounds=rounds, json_path=json_path, trees=also_tree)
    from ogb.utils import smiles2graph
    from rdkit import Chem
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # one core per sharding worker, as in the sharder
    smiles = bundled_smiles(limit)
    graphs = []
    for s in smiles:
        try:
            graphs.append(featurize_smiles(s))
        except FeaturizeError:
            pass
    valid = [s for s in smiles if Chem.MolFromSmiles(s) is not None]
    options = ShardOptions(structure=StructureOptions(), shard_size=len(smiles))
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for g in graphs], options.structure)
    records = [{**g, **st, schema.Y: np.zeros(1, np.float32), schema.META: {"idx": i, "num_nodes": len(g[schema.NODE_FEAT])}} for i, (g, st) in enumerate(zip(graphs, structures))]
    task = MoleculeTask("bench", 0, 0, smiles, np.arange(len(smiles)), np.zeros((len(smiles), 1), np.float32))

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
            "gtscale structure": (len(graphs), lambda: structure_many([(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for g in graphs], options.structure)),
            "gtscale serialize": (len(records), serialize),
            "gtscale full path": (len(smiles), lambda: build_shard(task, out, options, "bench")),
        }
        seconds = {name: [] for name in stages}
        for _ in range(rounds):
            for name, (_, fn) in stages.items():
                seconds[name].append(_timed(fn))
    baseline = len(valid) / statistics.median(seconds["ogb smiles2graph"])
    rows = []
    for name, (count, _) in stages.items():
        rate = count / statistics.median(seconds[name])
        rows.append({"stage": name, "molecules": count, "mol_per_s": rate, "vs_smiles2graph": rate / baseline})
    full = rows[-1]["mol_per_s"]
    mean_atoms = float(np.mean([len(g[schema.NODE_FEAT]) for g in graphs]))
    result = {
        "molecules": len(smiles),
        "mean_atoms": mean_atoms,
        "rounds": rounds,
        "structure": {"svd_rank": options.structure.svd_rank, "lap_k": options.structure.lap_k},
        "rows": rows,
        "full_path_vs_smiles2graph": full / baseline,
        "projected_pcqm4mv2_hours": {str(c): PCQM4MV2_MOLECULES / (full * c) / 3600 for c in (2, 64)},
    }
    print(f"{len(smiles)} molecules (mean {mean_atoms:.1f} atoms), one core, median of {rounds} interleaved rounds")
    print(f"{'stage':<22}{'mol/s':>10}{'× smiles2graph':>16}")
    for row in rows:
        print(f"{row['stage']:<22}{row['mol_per_s']:>10.0f}{row['vs_smiles2graph']:>16.2f}")
    for cores, hours in result["projected_pcqm4mv2_hours"].items():
        print(f"projected PCQM4Mv2 ({PCQM4MV2_MOLECULES:,} molecules) on {cores} cores: {hours * 60:.1f} min")
    write_json(json_path, result, "shard")
    return 0
