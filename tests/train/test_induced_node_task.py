"""Node anomaly detection with the sparse ET on node-induced subgraphs sampled online from a graph
store (data.graph): config checks, a 2-rank run (real gloo) that evaluates each val node exactly
once and learns, and `gtscale evaluate --split test` applying the validation Macro-F1 threshold."""

import json

import numpy as np
import pytest
import yaml

from launcher import logs, metrics, run_ranks

ET = {"node_width": 32, "head_dim": 16, "num_heads": 2, "num_memories": 32, "num_steps": 2, "step_size": 0.5}


def graph_config(path, store, run_dir, **sections):
    cfg = {
        "run_dir": str(run_dir), "seed": 0,
        "data": {"graph": {"store": str(store), "fraction": 0.2, "train_ratio": 0.4, "split_seed": 0}, "eval_split": "val",
                 "loader": {"num_workers": 1}},
        "model": "et-tfinance", "model_overrides": ET,
        "task": {"loss": "node_bce", "metric": "auroc", "evaluator": "node-anomaly", "head": {"hidden": [32]}},
        "optimizer": {"lr": 0.003}, "schedule": {"total_steps": 20, "warmup_steps": 2, "min_lr": 0.0},
        "deepspeed": {"zero_stage": 2, "precision": "fp32"}, "checkpoint": {"every": 1000, "keep": 1}, "eval": {"every": 10},
        "logging": {"every": 5, "tensorboard": False, "progress": False},
    } | sections
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A generated anomaly graph (3,000 nodes, 10 % anomalous: 36 in the val split, enough for a
    stable AUROC) whose anomalies are learnable from their features and their edges."""
    from gtscale.graphs.store import build_store
    from gtscale.graphs.synthetic import synthetic_source

    path = tmp_path_factory.mktemp("induced_store") / "store"
    build_store(synthetic_source(3000, 30000, seed=1, anomaly_ratio=0.1, anomaly_edge_share=0.05), path, progress=False)
    return path


@pytest.fixture(scope="module")
def splits(store):
    from gtscale.graphs.splits import ratio_split
    from gtscale.graphs.store import GraphStore

    labels = np.asarray(GraphStore.open(store).labels)
    return labels, ratio_split(labels, 0.4, 0)


@pytest.fixture(scope="module")
def two_rank_run(store, tmp_path_factory):
    """One 2-rank training run of the sparse ET on induced subgraphs (shared by the tests below)."""
    root = tmp_path_factory.mktemp("induced_run")
    path = graph_config(root / "c.yaml", store, root / "run")
    codes = run_ranks(2, [str(path)], root / "log")
    assert codes == [0, 0], logs(root / "log")
    return root / "run"


def refusal(path, *overrides) -> str:
    from gtscale.errors import UserError
    from gtscale.train.preflight import load_train_config

    with pytest.raises(UserError) as err:
        load_train_config(path, list(overrides))
    return str(err.value)


def test_graph_config_resolves_and_refuses(store, ego_shards, tmp_path, splits):
    from gtscale.train.preflight import load_train_config
    from gtscale.train.data_source import task_manifest
    from gtscale.train.node_task import resolve_anomaly_weight
    from gtscale.train.task_model import task_model_config

    path = graph_config(tmp_path / "c.yaml", store, tmp_path / "run")
    cfg = load_train_config(path, [])
    manifest = task_manifest(cfg.data)
    assert task_model_config(cfg, manifest)["node_float_dim"] == 10
    labels, split = splits
    train = labels[split["train"]]
    assert resolve_anomaly_weight(cfg.task, manifest, "train") == pytest.approx(np.sum(train == 0) / np.sum(train == 1))
    assert "model: 'egt' takes padded dense batches" in refusal(path, "model=egt-small", "model_overrides={}")
    assert "set exactly one of data.shards" in refusal(path, f"data.shards={ego_shards[1]}")
    assert "data.graph.fraction: must be in (0, 1]" in refusal(path, "data.graph.fraction=1.5")
    assert "data.graph.sampler: 'khop' is not one of" in refusal(path, "data.graph.sampler=khop")
    assert "data.graph.batch_targets: must be >= 1, got 0" in refusal(path, "data.graph.sampler=fanout", "data.graph.batch_targets=0")
    assert "(sampler fanout) gives edge lists" in refusal(path, "data.graph.sampler=fanout", "model=egt-small", "model_overrides={}")
    assert "data.graph.inference: full needs a model that attends along edges" in refusal(
        path, "data.graph.inference=full", "model=mnagt-small", "model_overrides={node_vocab: []}")
    assert "eval.inference: full needs a model that attends along edges" in refusal(
        path, "eval.inference=full", "model=mnagt-small", "model_overrides={node_vocab: []}")
    assert "eval.inference: 'every' is not one of" in refusal(path, "eval.inference=every")
    assert "eval.inference: must be sampled without data.graph" in refusal(path, "data.graph=null", f"data.shards={ego_shards[1]}", "eval.inference=full")
    assert "or data.graph.sampler: ego" in refusal(path, "model=egt-small", "model_overrides={}")
    assert "not a finished graph store" in refusal(path, f"data.graph.store={tmp_path}")


@pytest.mark.slow
def test_two_ranks_evaluate_each_val_node_once_and_learn(two_rank_run, splits):
    labels, split = splits
    for step in (10, 20):
        saved = np.load(two_rank_run / "predictions" / f"val-step{step:08d}.npz")
        assert saved["idx"].tolist() == sorted(split["val"].tolist()), "every val node exactly once"
        np.testing.assert_array_equal(saved["y_true"][:, 0], labels[saved["idx"]])
    train = metrics(two_rank_run)
    assert sorted(train) == list(range(5, 21, 5)) and all(np.isfinite(row["loss"]) for row in train.values())
    final = metrics(two_rank_run, "val")[20]
    assert final["samples"] == len(split["val"])
    # robust, not tight: the planted anomalies are learnable; chance is 0.5
    assert final["auroc"] > 0.65, final
    assert "baseline_auroc" in metrics(two_rank_run, "baseline")[0]


@pytest.mark.slow
def test_evaluate_test_split_uses_the_validation_threshold(two_rank_run):
    from gtscale.train.evaluate import evaluate_run
    from gtscale.train.node_metrics import choose_threshold, node_metrics

    test = evaluate_run(two_rank_run, "test", "best")
    val = evaluate_run(two_rank_run, "val", "best")
    saved_val = np.load(two_rank_run / "eval" / f"val-{val['tag']}.npz")
    saved_test = np.load(two_rank_run / "eval" / f"test-{test['tag']}.npz")
    threshold = choose_threshold(saved_val["y_true"][:, 0].astype(int), saved_val["y_pred"][:, 0])
    assert test["threshold_split"] == "val" and test["metrics"]["threshold"] == pytest.approx(threshold)
    y, s = saved_test["y_true"][:, 0].astype(int), saved_test["y_pred"][:, 0]
    assert test["metrics"]["macro_f1"] == pytest.approx(node_metrics(y, s, threshold)["macro_f1"])
    assert test["metrics"]["threshold"] != pytest.approx(choose_threshold(y, s)), "the test split's own optimum is not used"
    assert json.loads((two_rank_run / "eval" / f"test-{test['tag']}.json").read_text())["metrics"] == test["metrics"]
