"""`gtscale bench graph-sampling`: what each way of sampling a huge graph learns and costs, on a
generated graph whose labels depend on the neighbours' features (`gtscale graph build synthetic
--neighbour-signal S`: a share S of the label score's variance comes from the mean of the
neighbours' features), so that a model is only as good as what it sees of each neighbourhood.

Rows, each trained for the same CPU time on one core (torch on one thread, sampling in the same
process: the per-core figures are per CPU second, which is what one core gives when others share
the machine):
  features-only   scikit-learn's logistic regression on the node's own features (node_task.features_baseline)
  induced         the sparse ET on random node-induced subgraphs of `--fraction` of the nodes (the ET paper's protocol)
  fanout          the sparse ET on batches of `--batch-targets` targets with fan-out neighbourhoods (`--fanouts`)
each evaluated on the test split twice: by sampling (the sampler's own evaluation batches, scoring
`--eval-targets` random test nodes) and by full-neighbourhood inference (train/full_inference.py:
every node with all of its neighbours, AUROC over all test nodes). Every phase runs in a process
of its own, so its peak RSS is its own. The split is the BWGNN / ET one (40 % train, the rest 1:2
val / test); Adam at a constant learning rate, the weighted BCE of node tasks.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from gtscale.bench.report import claim_json, write_json
from gtscale.errors import UserError
from gtscale.graphs.synthetic import TSOCIAL_EDGES, TSOCIAL_NODES

TARGETS = {"test_auroc": 0.95, "fanout_targets_per_cpu_s": 5000.0, "full_inference_s": 600.0, "full_inference_peak_rss_gib": 8.0}


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB


def _in_own_process(fn, *args):
    """fn(*args) in a fresh process (spawned: its peak RSS is its own)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _setup(spec: dict):
    import torch

    from gtscale.graphs.splits import ratio_split
    from gtscale.graphs.store import GraphStore
    from gtscale.models.export import build_exported

    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    store = GraphStore.open(spec["store"])
    splits = ratio_split(np.asarray(store.labels), 0.4, spec["seed"])
    return store, splits, build_exported(spec["model"])


def _loader(spec: dict, sampler: str, targets: np.ndarray, train: bool):
    from gtscale.loader.config import LoaderConfig

    config = LoaderConfig(num_workers=0, keys=["target_y"], seed=spec["seed"])
    if sampler == "induced":
        from gtscale.graphs.induced import build_induced_loader

        return build_induced_loader(spec["store"], targets, spec["fraction"], config, train=train, rank=0, world_size=1)
    from gtscale.graphs.fanout import build_fanout_loader

    return build_fanout_loader(spec["store"], targets, spec["fanouts"], spec["batch_targets"], config, train=train, rank=0, world_size=1)


def _train(spec: dict, sampler: str, weights: str) -> dict:
    import torch

    from gtscale.train.node_task import node_task_loss

    store, splits, model = _setup(spec)
    labels = np.asarray(store.labels)[splits["train"]]
    pos_weight = float((labels == 0).sum() / max(1, (labels == 1).sum()))
    optimizer = torch.optim.Adam(model.parameters(), spec["lr"])
    loader = _loader(spec, sampler, splits["train"], train=True)
    counts = {"steps": 0, "targets": 0, "nodes": 0, "edges": 0}
    losses, wall, cpu = [], time.perf_counter(), time.process_time()
    model.train()
    while time.process_time() - cpu < spec["train_cpu_seconds"]:
        for batch in loader:
            loss = node_task_loss(batch, model(batch), pos_weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            counts = {"steps": counts["steps"] + 1, "targets": counts["targets"] + len(batch.target_id),
                      "nodes": counts["nodes"] + batch.num_nodes, "edges": counts["edges"] + batch.num_edges}
            if time.process_time() - cpu >= spec["train_cpu_seconds"]:
                break
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    torch.save(model.state_dict(), weights)
    return {**counts, "cpu_s": cpu, "wall_s": wall, "targets_per_cpu_s": counts["targets"] / cpu, "nodes_per_cpu_s": counts["nodes"] / cpu,
            "edges_per_cpu_s": counts["edges"] / cpu, "last_loss": float(np.mean(losses[-20:])), "peak_rss_gib": _peak_rss_gib()}


def _load(spec: dict, weights: str):
    import torch

    store, splits, model = _setup(spec)
    model.load_state_dict(torch.load(weights, weights_only=True))
    return store, splits, model.eval()


def _auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    known = labels >= 0
    return float(roc_auc_score(labels[known] == 1, scores[known]))


def _eval_sampled(spec: dict, sampler: str, weights: str, targets: np.ndarray) -> dict:
    import torch

    from gtscale.train.node_task import target_scores

    store, _, model = _load(spec, weights)
    ids, scores = [], []
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for batch in _loader(spec, sampler, targets, train=False):
            i, s = target_scores(batch, model(batch))
            ids.append(i.numpy())
            scores.append(s.numpy())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    ids, scores = np.concatenate(ids), np.concatenate(scores)
    return {"auroc": _auroc(np.asarray(store.labels)[ids], scores), "targets": len(ids), "cpu_s": cpu, "wall_s": wall,
            "targets_per_cpu_s": len(ids) / cpu, "peak_rss_gib": _peak_rss_gib()}


def _eval_full(spec: dict, weights: str, subset: np.ndarray, workdir: str) -> dict:
    from gtscale.train.full_inference import full_graph_logits

    store, splits, model = _load(spec, weights)
    wall, cpu = time.perf_counter(), time.process_time()
    logits = full_graph_logits(model, store, workdir, progress=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    labels = np.asarray(store.labels)
    return {"auroc": _auroc(labels[splits["test"]], logits[splits["test"]]), "auroc_eval_targets": _auroc(labels[subset], logits[subset]),
            "targets": len(splits["test"]), "cpu_s": cpu, "wall_s": wall, "nodes_per_s": store.num_nodes / wall,
            "edges_per_s": int(store.indptr[-1]) / wall, "peak_rss_gib": _peak_rss_gib()}


def _features_only(store_path: str, seed: int, subset: np.ndarray) -> dict:
    from gtscale.graphs.splits import ratio_split
    from gtscale.graphs.store import GraphStore
    from gtscale.train.node_task import features_baseline

    store = GraphStore.open(store_path)
    labels = np.asarray(store.labels)
    splits = ratio_split(labels, 0.4, seed)
    features = np.asarray(store.features, np.float32)
    wall = time.perf_counter()
    test = features_baseline((features[splits["train"]], labels[splits["train"]]), (features[splits["test"]], labels[splits["test"]]))
    subset_auroc = features_baseline((features[splits["train"]], labels[splits["train"]]), (features[subset], labels[subset]))
    return {"auroc": test["baseline_auroc"], "auroc_eval_targets": subset_auroc["baseline_auroc"], "wall_s": time.perf_counter() - wall,
            "peak_rss_gib": _peak_rss_gib()}


def _generate(nodes: int, edges: int, seed: int, anomaly_ratio: float, neighbour_signal: float, out: Path) -> tuple[str, float]:
    from gtscale.graphs.store import build_store
    from gtscale.graphs.synthetic import synthetic_source

    wall = time.perf_counter()
    build_store(synthetic_source(nodes, edges, seed, anomaly_ratio=anomaly_ratio, neighbour_signal=neighbour_signal),
                out, progress=False)
    return str(out), time.perf_counter() - wall


def bench_graph_sampling(*, store: str | None = None, nodes: int = TSOCIAL_NODES, edges: int = TSOCIAL_EDGES, neighbour_signal: float = 0.5,
                         anomaly_ratio: float = 0.03, seed: int = 0, model: str = "et-tsocial", model_overrides: str = "{}",
                         samplers: str = "induced,fanout", fraction: float = 0.05, fanouts: str = "15,10", batch_targets: int = 1024,
                         lr: float = 2e-3, train_cpu_seconds: float = 300.0, eval_targets: int = 50_000, workdir: str | None = None,
                         json_path: str | None = None) -> int:
    """Features-only, induced and fan-out training of the sparse ET `model` on the store `store` (default:
    a generated one whose labels depend on the neighbours): test AUROC sampled and full, targets/s, memory."""
    import tempfile

    from gtscale.graphs.store import GraphStore
    from gtscale.models import load_model_config

    claim_json(json_path)
    chosen = [s for s in samplers.split(",") if s]
    if not chosen or any(s not in ("induced", "fanout") for s in chosen):
        raise UserError(f"--samplers: choose from induced, fanout (got {samplers!r})")
    overrides = yaml.safe_load(model_overrides) or {}
    if not isinstance(overrides, dict):
        raise UserError(f"--model-overrides: a YAML mapping, got {model_overrides!r}")
    load_before = os.getloadavg()
    if workdir:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        work = Path(tmp)
        store_path, generate_s = (store, 0.0) if store else _generate(nodes, edges, seed, anomaly_ratio, neighbour_signal, work / "store")
        graph = GraphStore.open(store_path)
        model_cfg = load_model_config(model) | overrides | {
            "node_float_dim": int(graph.manifest["num_features"]), "head": {"kind": "node", "num_outputs": 1, "hidden": []}}
        if model_cfg.get("form") != "sparse":
            raise UserError(f"--model: {model!r} is not the sparse ET (form: sparse)")
        spec = {"store": store_path, "seed": seed, "model": model_cfg, "fraction": fraction, "lr": lr,
                "fanouts": [int(f) for f in fanouts.split(",")], "batch_targets": batch_targets,
                "train_cpu_seconds": train_cpu_seconds}
        from gtscale.graphs.splits import ratio_split

        test = ratio_split(np.asarray(graph.labels), 0.4, seed)["test"]
        subset = np.sort(np.random.default_rng(seed).choice(test, min(eval_targets, len(test)), replace=False))
        rows = {"features-only": _in_own_process(_features_only, store_path, seed, subset)}
        for sampler in chosen:
            weights = str(work / f"{sampler}.pt")
            row = {"train": _in_own_process(_train, spec, sampler, weights)}
            row["sampled"] = _in_own_process(_eval_sampled, spec, sampler, weights, subset)
            row["full"] = _in_own_process(_eval_full, spec, weights, subset, str(work))
            rows[sampler] = row
    result = {
        "graph": {"store": store or "generated", "nodes": graph.num_nodes, "undirected_edges": graph.num_edges,
                  "neighbour_signal": graph.manifest["build"]["source"].get("neighbour_signal"), "generate_s": generate_s},
        "model": {k: model_cfg[k] for k in ("node_width", "num_heads", "head_dim", "num_memories", "num_steps", "self_loops")},
        "settings": {"fraction": fraction, "fanouts": spec["fanouts"], "batch_targets": batch_targets, "lr": lr,
                     "train_cpu_seconds": train_cpu_seconds, "eval_targets": len(subset), "seed": seed},
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "rows": rows,
    }
    _print(result)
    write_json(json_path, result, "graph-sampling")
    return 0


def _print(r: dict) -> None:
    g, rows = r["graph"], r["rows"]
    print(f"graph: {g['nodes']:,} nodes, {g['undirected_edges']:,} undirected edges, neighbour signal {g['neighbour_signal']}; model {r['model']}; "
          f"load average before {r['load_average_before_after'][0][0]:.2f}, after {r['load_average_before_after'][1][0]:.2f}")
    print(f"{'row':<16}{'AUROC sampled':>14}{'AUROC full':>12}{'targets/CPU s':>15}{'nodes/CPU s':>13}{'edges/CPU s':>13}"
          f"{'train RSS GiB':>15}{'full inference':>24}")
    lr = rows["features-only"]
    print(f"{'features-only':<16}{lr['auroc_eval_targets']:>14.4f}{lr['auroc']:>12.4f}")
    for name, row in rows.items():
        if name == "features-only":
            continue
        t, s, f = row["train"], row["sampled"], row["full"]
        print(f"{name:<16}{s['auroc']:>14.4f}{f['auroc']:>12.4f}{t['targets_per_cpu_s']:>15,.0f}{t['nodes_per_cpu_s']:>13,.0f}"
              f"{t['edges_per_cpu_s']:>13,.0f}{t['peak_rss_gib']:>15.2f}{f['wall_s']:>10.0f} s, {f['peak_rss_gib']:.2f} GiB")
