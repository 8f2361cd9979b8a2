"""Node anomaly detection with the sparse ET on fan-out neighbourhoods (data.graph sampler fanout):
a 2-rank run (real gloo) that evaluates each val node exactly once; `gtscale evaluate --inference
full` and `gtscale graph predict` score every node with all its neighbours, equal to one forward
of the exported model over the whole graph; a 2-rank ZeRO-3 run whose periodic evaluation is full
inference (eval.inference full) picks its best checkpoint by the metric of those scores."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from launcher import logs, metrics, run_ranks

from gtscale.cli import main
from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.loader.edge_batch import EdgeBatch

ET = {"node_width": 32, "head_dim": 16, "num_heads": 2, "num_memories": 32, "num_steps": 1, "step_size": 1.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """3,000 nodes whose labels come 80 % from their neighbours' features (10 % anomalous)."""
    path = tmp_path_factory.mktemp("fanout_store") / "store"
    build_store(synthetic_source(3000, 15000, seed=2, anomaly_ratio=0.1, neighbour_signal=0.8), path, progress=False)
    return path


def _train(root, store, **sections) -> Path:
    """A 2-rank run of 20 steps (evaluated at 10 and 20) with `sections` replacing the config's."""
    cfg = {
        "run_dir": str(root / "run"), "seed": 0,
        "data": {"graph": {"store": str(store), "sampler": "fanout", "fanouts": [10, 5], "batch_targets": 100, "train_ratio": 0.4,
                           "split_seed": 0}, "eval_split": "val", "loader": {"num_workers": 1}},
        "model": "et-tfinance", "model_overrides": ET,
        "task": {"loss": "node_bce", "metric": "auroc", "evaluator": "node-anomaly", "head": {"hidden": [32]}},
        "optimizer": {"lr": 0.003}, "schedule": {"total_steps": 20, "warmup_steps": 2, "min_lr": 0.0},
        "deepspeed": {"zero_stage": 2, "precision": "fp32"}, "checkpoint": {"every": 1000, "keep": 1}, "eval": {"every": 10},
        "logging": {"every": 5, "tensorboard": False, "progress": False},
    } | sections
    (root / "c.yaml").write_text(yaml.safe_dump(cfg))
    codes = run_ranks(2, [str(root / "c.yaml")], root / "log")
    assert codes == [0, 0], logs(root / "log")
    return root / "run"


@pytest.fixture(scope="module")
def run_dir(store, tmp_path_factory):
    return _train(tmp_path_factory.mktemp("fanout_run"), store)


def _splits(store):
    from gtscale.graphs.splits import ratio_split

    labels = np.asarray(GraphStore.open(store).labels)
    return labels, ratio_split(labels, 0.4, 0)


def test_two_ranks_evaluate_each_val_node_once(run_dir, store):
    labels, split = _splits(store)
    for step in (10, 20):
        saved = np.load(run_dir / "predictions" / f"val-step{step:08d}.npz")
        assert saved["idx"].tolist() == sorted(split["val"].tolist()), "every val node exactly once"
        np.testing.assert_array_equal(saved["y_true"][:, 0], labels[saved["idx"]])
    assert all(np.isfinite(row["loss"]) for row in metrics(run_dir).values())
    final = metrics(run_dir, "val")[20]
    assert final["samples"] == len(split["val"])
    # robust, not tight: the neighbours' features carry 80 % of the signal, which the features alone miss
    assert final["auroc"] > metrics(run_dir, "baseline")[0]["baseline_auroc"] + 0.05, final


def _exported(run_dir, tag: str = "step-00000020"):
    """A checkpoint of the run (default its last) exported where `gtscale evaluate` puts it (tests
    may run in any order, on any xdist worker: none relies on another having exported it)."""
    from gtscale.train.export import export

    folder = run_dir / "export" / tag
    if not (folder / "model.pt").is_file():
        export(run_dir, tag, folder)
    return folder


def _whole_graph_logits(run_dir, store, tag: str = "step-00000020") -> np.ndarray:
    from gtscale.models.export import load_exported

    model, _ = load_exported(_exported(run_dir, tag))
    g = GraphStore.open(store)
    rows = np.repeat(np.arange(g.num_nodes), np.diff(np.asarray(g.indptr)))
    batch = EdgeBatch(edge_index=torch.from_numpy(np.stack([np.asarray(g.indices, np.int64), rows])),
                      graph_index=torch.zeros(g.num_nodes, dtype=torch.long), num_graphs=1,
                      node_feat_float=torch.from_numpy(np.array(g.features, np.float32)))
    with torch.no_grad():
        return model.eval()(batch)[:, 0].numpy()


def test_evaluate_full_scores_every_test_node_with_all_its_neighbours(run_dir, store):
    from gtscale.train.evaluate import evaluate_run

    labels, split = _splits(store)
    result = evaluate_run(run_dir, "test", "best", inference="full")
    assert result["inference"] == "full" and result["samples"] == len(split["test"]) and result["threshold_split"] == "val"
    saved = np.load(run_dir / "eval" / f"test-{result['tag']}.npz")
    assert saved["idx"].tolist() == sorted(split["test"].tolist())
    expected = _whole_graph_logits(run_dir, store)
    np.testing.assert_allclose(saved["y_pred"][:, 0], expected[saved["idx"]], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(saved["y_true"][:, 0], labels[saved["idx"]])
    assert [p.name for p in (run_dir / "eval").iterdir() if p.name.startswith(".")] == [], "no node states left behind"
    sampled = evaluate_run(run_dir, "test", "best", inference="sampled")
    assert sampled["inference"] == "sampled" and sampled["samples"] == len(split["test"])


def test_graph_predict_writes_every_nodes_score(run_dir, store, tmp_path, capsys):
    expected = _whole_graph_logits(run_dir, store)
    export = _exported(run_dir)
    out = tmp_path / "scores"
    for _ in range(2):  # a rerun replaces its own output
        assert main(["graph", "predict", str(export), "--graph", str(store), "--out", str(out), "--no-progress"]) == 0
    scores = np.load(out / "scores.npy")
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-expected)), rtol=1e-4, atol=1e-5)
    record = json.loads((out / "predict.json").read_text())
    assert record["nodes"] == len(scores) == 3000 and record["inference"] == "full"
    assert sorted(p.name for p in out.iterdir()) == ["predict.json", "scores.npy"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    assert main(["graph", "predict", str(export), "--graph", str(store), "--out", str(foreign)]) == 2
    assert "holds files gtscale did not write" in capsys.readouterr().err and (foreign / "notes.txt").read_text() == "keep"


def test_periodic_full_inference_on_two_zero3_ranks_picks_the_best_by_its_scores(store, tmp_path):
    """eval.inference full: rank 0 scores every val node with all of its neighbours, from the
    weights ZeRO-3 gathers on both ranks; both ranks finish (every collective reached), the saved
    predictions are the whole-graph forward of the checkpoint, the logged metrics are the node
    metrics of those predictions, and best.json holds the step whose task.metric was best."""
    from gtscale.train.node_task import evaluate_nodes

    run = _train(tmp_path, store, deepspeed={"zero_stage": 3, "precision": "fp32"}, eval={"every": 10, "inference": "full"},
                 task={"loss": "node_bce", "metric": "auprc", "evaluator": "node-anomaly", "head": {"hidden": [32]}, "features_baseline": False},
                 checkpoint={"every": 10, "keep": 2})
    labels, split = _splits(store)
    logged = metrics(run, "val")
    assert sorted(logged) == [10, 20]
    for step in (10, 20):
        saved = np.load(run / "predictions" / f"val-step{step:08d}.npz")
        assert saved["idx"].tolist() == sorted(split["val"].tolist())
        np.testing.assert_array_equal(saved["y_true"][:, 0], labels[saved["idx"]])
        expected = _whole_graph_logits(run, store, f"step-{step:08d}")
        np.testing.assert_allclose(saved["y_pred"][:, 0], expected[saved["idx"]], rtol=1e-4, atol=1e-4)
        scored = evaluate_nodes(saved["y_pred"][:, 0], saved["y_true"][:, 0])
        assert logged[step]["auprc"] == pytest.approx(scored["auprc"]) and logged[step]["samples"] == len(split["val"])
    best = json.loads((run / "best.json").read_text())
    assert best["metric"] == "auprc" and best["value"] == max(row["auprc"] for row in logged.values())
    assert logged[best["step"]]["auprc"] == best["value"]
    assert [p.name for p in (run / "eval").iterdir() if p.name.startswith(".")] == [], "no node states left behind"
