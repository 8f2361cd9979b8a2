"""`gtscale bench graph`: the huge-graph path on a generated graph (default: T-Social's size).

Figures, in one run, against targets for a 2-core, 24 GiB machine:
  CSR build          `gtscale graph build plain` in a child process: wall time and peak RSS
                     (≤ 3 min, ≤ 6 GiB at 5.78 M nodes / 73.1 M edges)
  store open         GraphStore.open (memory maps, no copy; < 1 s)
  ego subgraphs      2-hop, fan-outs 16/16, 64-node cap, with spd/pred/degrees/SVD, one core
                     (≥ 2,000 /s per core), beside the plainest correct implementation (scipy.sparse
                     + a Python BFS with the same rules + scipy shortest paths and numpy SVD)
  ego-shard writing  `gtscale shard graph-ego`'s work for one shard on one core: sample, structure,
                     features, tar (≥ 1,000 records/s per core)
The targets are judged on wall time; the ego and shard figures also come per CPU second of this
process, which is what one core delivers when other work shares the machine (see the load average).
  induced subgraph   5 % of the nodes and every edge among them (≤ 5 s), beside scipy's A[S][:, S]
                     (both include drawing the nodes; best of 3 interleaved rounds)
Projections: ego subgraphs of all 5.78 M T-Social nodes on 2 and 64 cores.
The generated graph is written as a plain folder first (its time is reported, not a target).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gtscale.graphs.shard_ego import EgoShardOptions, shard_graph_ego
from gtscale.graphs.sample import EgoSampler, ego_structures, induced_subgraph, priority_py
from gtscale.graphs.store import GraphStore
from gtscale.graphs.synthetic import TSOCIAL_EDGES, TSOCIAL_NODES, synthetic_source
from gtscale.bench.report import claim_json, write_json
from gtscale.prep.structure import StructureOptions

TARGETS = {"build_s": 180.0, "build_peak_rss_gib": 6.0, "open_s": 1.0, "ego_per_s_per_core": 2000.0, "induced_5pct_s": 5.0,
           "ego_shard_records_per_s_per_core": 1000.0}


def _write_plain(folder: Path, nodes: int, edges: int, seed: int) -> None:
    """The generated graph as edges.npy (int32) / features.npy / labels.npy, block by block."""
    source = synthetic_source(nodes, edges, seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = np.lib.format.open_memmap(folder / "edges.npy", "w+", np.int32, (edges, 2))
    for start, src, dst, _ in source.edge_blocks():
        out[start : start + len(src), 0], out[start : start + len(src), 1] = src, dst
    out.flush()
    del out
    feats = np.lib.format.open_memmap(folder / "features.npy", "w+", np.float32, (nodes, source.num_features))
    for start, block in source.feature_blocks():
        feats[start : start + len(block)] = block
    feats.flush()
    del feats
    np.save(folder / "labels.npy", source.labels)


def _build_in_child(plain: Path, store: Path) -> tuple[float, float]:
    """(seconds, peak RSS GiB) of `gtscale graph build plain` in its own process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gtscale.cli", "graph", "build", "plain", "--input", str(plain), "--out", str(store), "--quiet"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB → GiB


def baseline_ego(adj, target: int, fanouts, max_nodes: int, seed: int, svd_rank: int) -> dict:
    """The plainest correct ego subgraph: a Python BFS over scipy's CSR with the sampler's rules,
    scipy's induced submatrix and shortest paths (with predecessors), numpy's SVD, degrees."""
    from scipy.sparse.csgraph import shortest_path

    nodes, seen, frontier = [target], {target}, [target]
    for cap in fanouts:
        added = []
        for u in frontier:
            fresh = [v for v in adj.indices[adj.indptr[u] : adj.indptr[u + 1]].tolist() if v not in seen]
            for v in sorted(fresh, key=lambda v: (priority_py(seed, target, v), v))[:cap]:
                if len(nodes) == max_nodes:
                    break
                seen.add(v)
                nodes.append(v)
                added.append(v)
        frontier = added
    sub = adj[nodes][:, nodes]
    spd, pred = shortest_path(sub, unweighted=True, return_predecessors=True)
    u, s, vt = np.linalg.svd(sub.toarray() + np.eye(len(nodes)))
    r = min(svd_rank, len(nodes))
    return {"spd": spd, "pred": pred, "svd": np.concatenate([u[:, :r] * np.sqrt(s[:r]), vt.T[:, :r] * np.sqrt(s[:r])], 1),
            "degree": np.asarray(sub.sum(axis=1)).ravel()}


def _ego_rates(store: GraphStore, targets: np.ndarray, fanouts, max_nodes: int, seed: int, options: StructureOptions) -> dict:
    sampler = EgoSampler(store.indptr, store.indices, fanouts, max_nodes, seed)
    ego_structures(sampler.sample(targets[:64]), options)  # compile and warm up
    start, cpu = time.perf_counter(), time.process_time()
    subs = []
    for b in range(0, len(targets), 256):
        subs += sampler.sample(targets[b : b + 256])
    sample_s, sample_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    for b in range(0, len(subs), 256):
        ego_structures(subs[b : b + 256], options)
    structure_s, structure_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"sample_per_s": len(targets) / sample_s, "with_structure_per_s": len(targets) / (sample_s + structure_s),
            "sample_per_cpu_s": len(targets) / sample_cpu, "with_structure_per_cpu_s": len(targets) / (sample_cpu + structure_cpu),
            "mean_nodes": float(np.mean([len(s.nodes) for s in subs])), "mean_edges": float(np.mean([s.edge_index.shape[1] for s in subs]))}


def bench_graph(*, nodes: int = TSOCIAL_NODES, edges: int = TSOCIAL_EDGES, seed: int = 0, fanouts: str = "16,16", max_nodes: int = 64,
                svd_rank: int = 8, ego_targets: int = 4000, baseline_targets: int = 100, shard_targets: int = 2000,
                fraction: float = 0.05, workdir: str | None = None, json_path: str | None = None) -> int:
    """Huge-graph CSR build, store open, ego / induced sampling against scipy + Python BFS, on a
    generated graph of `nodes` and `edges`."""
    claim_json(json_path)
    import scipy.sparse as sp
    import torch
    from threadpoolctl import threadpool_limits

    caps = tuple(int(f) for f in fanouts.split(","))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        _write_plain(work / "plain", nodes, edges, seed)
        generate_s = time.perf_counter() - start
        build_s, build_rss = _build_in_child(work / "plain", work / "store")
        (work / "plain" / "edges.npy").unlink()  # free the disk before sampling
        start = time.perf_counter()
        store = GraphStore.open(work / "store")
        open_s = time.perf_counter() - start

        threadpool_limits(1)  # one core: the per-core figures
        torch.set_num_threads(1)
        options = StructureOptions(spd=True, degree=True, svd_rank=svd_rank, lap_k=0)
        rng = np.random.default_rng(seed)
        targets = rng.integers(0, store.num_nodes, ego_targets)
        ego = _ego_rates(store, targets, caps, max_nodes, seed, options)
        adj = sp.csr_matrix((np.ones(len(store.indices), np.float32), store.indices, store.indptr), shape=(store.num_nodes,) * 2)
        start = time.perf_counter()
        for t in targets[: baseline_targets].tolist():
            baseline_ego(adj, t, caps, max_nodes, seed, svd_rank)
        baseline_rate = baseline_targets / (time.perf_counter() - start)

        sharded = np.sort(targets[: shard_targets])
        shard_options = EgoShardOptions(options, caps, max_nodes, seed, shard_size=len(sharded))
        start, cpu = time.perf_counter(), time.process_time()
        shard_graph_ego(work / "store", {"train": sharded}, {"bench": True}, work / "shards", shard_options, workers=1, progress=False)
        shard_rate = len(sharded) / (time.perf_counter() - start)
        shard_cpu_rate = len(sharded) / (time.process_time() - cpu)  # workers=1: all in this process

        induced_s, induced_scipy_s = [], []
        for round_seed in range(3):  # interleaved rounds (the first also warms the page cache); best reported
            start = time.perf_counter()
            induced_nodes, edge_index = induced_subgraph(store.indptr, store.indices, fraction, seed + round_seed)
            induced_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            drawn = np.sort(np.random.default_rng(seed + round_seed).choice(store.num_nodes, len(induced_nodes), replace=False))
            ref = adj[drawn][:, drawn]
            induced_scipy_s.append(time.perf_counter() - start)
        induced_s, induced_scipy_s = min(induced_s), min(induced_scipy_s)
        manifest = store.manifest
    rate = ego["with_structure_per_s"]
    result = {
        "graph": {"nodes": nodes, "edges_drawn": edges, "undirected_edges": manifest["num_edges"], "seed": seed},
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "generate_s": generate_s,
        "build_s": build_s,
        "build_peak_rss_gib": build_rss,
        "open_s": open_s,
        "ego": {"fanouts": caps, "max_nodes": max_nodes, "svd_rank": svd_rank, "targets": ego_targets, **ego,
                "baseline_targets": baseline_targets, "baseline_with_structure_per_s": baseline_rate,
                "vs_baseline": rate / baseline_rate},
        "ego_shard_records_per_s": shard_rate,
        "ego_shard_records_per_cpu_s": shard_cpu_rate,
        "induced": {"fraction": fraction, "nodes": len(induced_nodes), "edges": int(edge_index.shape[1]), "seconds": induced_s,
                    "scipy_seconds": induced_scipy_s, "scipy_edges": int(ref.nnz), "vs_scipy": induced_scipy_s / induced_s},
        "projected_ego_all_tsocial_nodes_s": {str(c): TSOCIAL_NODES / (rate * c) for c in (2, 64)},
    }
    result["targets_met"] = {
        "build_s": build_s <= TARGETS["build_s"], "build_peak_rss_gib": build_rss <= TARGETS["build_peak_rss_gib"],
        "open_s": open_s < TARGETS["open_s"], "ego_per_s_per_core": rate >= TARGETS["ego_per_s_per_core"],
        "induced_5pct_s": induced_s <= TARGETS["induced_5pct_s"],
        "ego_shard_records_per_s_per_core": shard_rate >= TARGETS["ego_shard_records_per_s_per_core"],
    }
    _print(result)
    write_json(json_path, result, "graph")
    return 0


def _print(r: dict) -> None:
    g, e, i, ok = r["graph"], r["ego"], r["induced"], r["targets_met"]
    mark = {True: "ok", False: "MISSED"}
    print(f"graph: {g['nodes']:,} nodes, {g['edges_drawn']:,} edges drawn → {g['undirected_edges']:,} undirected; "
          f"load average before {r['load_average_before_after'][0][0]:.2f}, after {r['load_average_before_after'][1][0]:.2f}")
    print(f"{'figure':<40}{'value':>14}  target")
    print(f"{'generate plain folder (s)':<40}{r['generate_s']:>14.1f}  -")
    print(f"{'CSR build (s)':<40}{r['build_s']:>14.1f}  ≤ 180 {mark[ok['build_s']]}")
    print(f"{'CSR build peak RSS (GiB)':<40}{r['build_peak_rss_gib']:>14.2f}  ≤ 6 {mark[ok['build_peak_rss_gib']]}")
    print(f"{'store open (s)':<40}{r['open_s']:>14.3f}  < 1 {mark[ok['open_s']]}")
    print(f"{'ego sample only (/s, 1 core)':<40}{e['sample_per_s']:>14.0f}  -")
    print(f"{'ego + structure (/s, 1 core)':<40}{e['with_structure_per_s']:>14.0f}  ≥ 2000 {mark[ok['ego_per_s_per_core']]}")
    print(f"{'  per CPU second (shared machine)':<40}{e['with_structure_per_cpu_s']:>14.0f}  (sample only {e['sample_per_cpu_s']:.0f})")
    print(f"{'  scipy + Python BFS (/s, 1 core)':<40}{e['baseline_with_structure_per_s']:>14.1f}  ratio {e['vs_baseline']:.1f}×")
    print(f"{'  mean nodes / edges per ego':<40}{e['mean_nodes']:>8.1f} / {e['mean_edges']:.0f}")
    print(f"{'ego-shard writing (records/s, 1 core)':<40}{r['ego_shard_records_per_s']:>14.0f}  ≥ 1000 {mark[ok['ego_shard_records_per_s_per_core']]}")
    print(f"{'  per CPU second (shared machine)':<40}{r['ego_shard_records_per_cpu_s']:>14.0f}")
    print(f"{'induced ' + format(i['fraction'], '.0%') + ' subgraph (s)':<40}{i['seconds']:>14.2f}  ≤ 5 {mark[ok['induced_5pct_s']]}")
    print(f"{'  scipy A[S][:, S] (s)':<40}{i['scipy_seconds']:>14.2f}  ratio {i['vs_scipy']:.1f}×")
    for cores, seconds in r["projected_ego_all_tsocial_nodes_s"].items():
        print(f"projected ego + structure for all {TSOCIAL_NODES:,} T-Social nodes on {cores} cores: {seconds / 60:.1f} min")
