"""Node anomaly detection in the trainer: config checks against the shards' task type, the weighted
BCE at the target nodes against a hand computation, a 2-rank run (real gloo) that evaluates
each eval target exactly once and trains with finite losses, and the graph store sampled online
into the same ego subgraphs (data.graph.sampler: ego)."""

import dataclasses
import json

import numpy as np
import pytest
import torch
import yaml

from launcher import logs, metrics, run_ranks, write_config

NODE_TASK = {"loss": "node_bce", "metric": "auroc", "evaluator": "node-anomaly", "head": {"hidden": [16]}}
TINY_EGO_MODEL = {"num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "attention_dropout": 0.0, "num_virtual_nodes": 1,
                  "svd_rank": 4, "upto_hop": 4, "edge_vocab": [1]}


def node_config(tmp_path, shards, name="c.yaml", **sections):
    sections = {"task": NODE_TASK, "model_overrides": TINY_EGO_MODEL,
                "data": {"eval_split": "val", "loader": {"batch_size": 16, "epoch_batches": 0}}} | sections
    return write_config(tmp_path / name, shards, tmp_path / "run", **sections)


def refusal(path, *overrides) -> str:
    from gtscale.errors import UserError
    from gtscale.train.preflight import load_train_config

    with pytest.raises(UserError) as err:
        load_train_config(path, list(overrides))
    return str(err.value)


def test_node_config_resolves_model_and_weight(ego_shards, tmp_path):
    from gtscale.format.manifest import load_manifest
    from gtscale.graphs.splits import ratio_split
    from gtscale.graphs.store import GraphStore
    from gtscale.train.preflight import load_train_config
    from gtscale.train.node_task import resolve_anomaly_weight
    from gtscale.train.task_model import task_model_config

    store_path, shards = ego_shards
    cfg = load_train_config(node_config(tmp_path, shards), [])
    manifest = load_manifest(shards)
    model_cfg = task_model_config(cfg, manifest)
    assert model_cfg["node_float_dim"] == 10 and model_cfg["head"]["kind"] == "node"
    labels = np.asarray(GraphStore.open(store_path).labels)
    train = labels[ratio_split(labels, 0.4, 0)["train"]]
    assert resolve_anomaly_weight(cfg.task, manifest, "train") == pytest.approx(np.sum(train == 0) / np.sum(train == 1))
    assert resolve_anomaly_weight(dataclasses.replace(cfg.task, anomaly_weight=1.0), manifest, "train") == 1.0


@pytest.mark.parametrize("overrides,message", [
    (["task.loss=l1"], "task.loss: 'l1' does not suit evaluator 'node-anomaly'"),
    (["task.metric=mae"], "task.metric: 'mae' is not reported by evaluator 'node-anomaly'"),
    (["task.evaluator=pcqm4mv2", "task.loss=l1", "task.metric=mae"], "task.evaluator:"),
    (["task.anomaly_weight=-1.0"], "task.anomaly_weight: must be > 0, got -1.0"),
    (["task.anomaly_weight=often"], "task.anomaly_weight:"),
    (["data.train_split=nowhere"], "data.train_split: 'nowhere' is not a split of"),
])
def test_node_shards_refuse_graph_task_settings(ego_shards, tmp_path, overrides, message):
    assert message in refusal(node_config(tmp_path, ego_shards[1]), *overrides)


def test_graph_shards_refuse_node_task(tpsa_shards, tmp_path):
    path = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", task=NODE_TASK)
    assert "task.evaluator: 'node-anomaly' needs node-task shards" in refusal(path)
    assert "task.loss: 'node_bce' needs evaluator 'node-anomaly'" in refusal(path, "task.evaluator=pcqm4mv2", "task.metric=mae")


def test_auto_weight_needs_both_classes_in_the_train_split(ego_shards, tmp_path):
    import shutil

    shards = tmp_path / "shards"
    shutil.copytree(ego_shards[1], shards)
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["task"]["label_counts"]["train"]["anomalous"] = 0
    (shards / "manifest.json").write_text(json.dumps(manifest))
    path = node_config(tmp_path, shards)
    assert "task.anomaly_weight: auto needs both classes in split 'train'" in refusal(path)
    from gtscale.train.preflight import load_train_config

    assert load_train_config(path, ["task.anomaly_weight=3.0"]).task.anomaly_weight == 3.0


def test_node_loss_is_weighted_bce_at_the_targets(ego_shards):
    from gtscale.format import schema
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.train.node_task import node_task_loss

    config = LoaderConfig(batching="graphs", batch_size=32, num_workers=0, keys=[schema.TARGET_Y], bucketing=False)
    batch = next(iter(build_loader(ego_shards[1], "train", config, train=False, rank=0, world_size=1)))
    batch.target_y_mask[:3] = False  # some targets unlabelled: they must not count
    torch.manual_seed(0)
    scores = torch.randn(batch.num_graphs, batch.max_graph_nodes, 1)
    omega = 7.0
    loss = float(node_task_loss(batch, scores, omega))
    s = scores[torch.arange(batch.num_graphs), batch.target_pos[:, 0], 0].double().numpy()  # the target is node 0
    y = batch.target_y[:, 0].double().numpy()
    keep = batch.target_y_mask[:, 0].numpy()
    p = 1 / (1 + np.exp(-s))
    by_hand = -(omega * y * np.log(p) + (1 - y) * np.log(1 - p))[keep].mean()
    assert y[keep].sum() > 0 and loss == pytest.approx(by_hand, rel=1e-5)
    from gtscale.train.node_metrics import node_bce

    as_indexed = node_bce(torch.from_numpy(s).float(), torch.from_numpy(y).float(), torch.from_numpy(keep), omega)
    assert loss == pytest.approx(float(as_indexed), rel=1e-5)
    batch.target_y_mask[:] = False
    scores.requires_grad_(True)
    empty = node_task_loss(batch, scores, omega)
    empty.backward()
    assert float(empty.detach()) == 0.0 and scores.grad is not None and not scores.grad.any()


@pytest.mark.slow
def test_two_ranks_evaluate_each_target_once(ego_shards, tmp_path):
    from gtscale.graphs.splits import ratio_split
    from gtscale.graphs.store import GraphStore

    store_path, shards = ego_shards
    path = node_config(tmp_path, shards, schedule={"total_steps": 6, "warmup_steps": 1, "min_lr": 0.0}, eval={"every": 3})
    assert run_ranks(2, [str(path)], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    run = tmp_path / "run"
    labels = np.asarray(GraphStore.open(store_path).labels)
    val = ratio_split(labels, 0.4, 0)["val"]
    for step in (3, 6):
        saved = np.load(run / "predictions" / f"val-step{step:08d}.npz")
        assert saved["idx"].tolist() == sorted(val.tolist()), "every val target exactly once"
        np.testing.assert_array_equal(saved["y_true"][:, 0], labels[saved["idx"]])
        assert np.isfinite(saved["y_pred"]).all()
    train = metrics(run)
    assert sorted(train) == list(range(1, 7)) and all(np.isfinite(row["loss"]) for row in train.values())
    evaluated = metrics(run, "val")
    assert {"auroc", "auprc", "macro_f1", "rec_at_k", "threshold"} <= set(evaluated[6]) and evaluated[6]["samples"] == len(val)
    baseline = metrics(run, "baseline")[0]
    assert 0.0 <= baseline["baseline_auroc"] <= 1.0 and baseline["baseline_eval_nodes"] == len(val)
    assert json.loads((run / "best.json").read_text())["metric"] == "auroc"


def store_config(tmp_path, store, **graph):
    """node_config on the graph store sampled online (sampler ego), with the options the ego shards were cut with."""
    graph = {"store": str(store), "sampler": "ego", "fanouts": [5, 3], "max_nodes": 16, "svd_rank": 4, "lap_k": 0, "train_ratio": 0.4} | graph
    path = node_config(tmp_path, None, name="store.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["data"] = {k: v for k, v in raw["data"].items() if k != "shards"} | {"graph": graph}
    path.write_text(yaml.safe_dump(raw))
    return path


def test_ego_sampler_gives_the_ego_shards_batches(ego_shards, tmp_path):
    """data.graph.sampler: ego samples during training what `gtscale shard graph-ego` writes with
    the same options: the dense model's config resolves, and the split loader of the trainer and
    `gtscale evaluate` yields the shards' batches, so every val target is predicted once."""
    from gtscale.format import schema
    from gtscale.format.manifest import load_manifest
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.train.data_source import split_loader, task_manifest
    from gtscale.train.preflight import load_train_config
    from gtscale.train.tasks import NodeTask, build_task, predict

    store, shards = ego_shards
    path = store_config(tmp_path, store)
    cfg = load_train_config(path, [])
    manifest = task_manifest(cfg.data)
    assert manifest["task"] == load_manifest(shards)["task"]  # label counts of the same splits
    config = LoaderConfig(batching="graphs", batch_size=16, num_workers=0, bucketing=False, keys=[schema.TARGET_Y, "spd", "svd_pe"])
    online = list(split_loader(cfg.data, manifest, "val", config, train=False, rank=0, world_size=1))
    offline = list(build_loader(shards, "val", config, train=False, rank=0, world_size=1))
    assert len(online) == len(offline)
    for a, b in zip(online, offline):
        assert torch.equal(a.target_id, b.target_id) and torch.equal(a.node_feat_float, b.node_feat_float) and torch.equal(a.spd, b.spd)
    task = build_task(cfg, manifest)
    assert isinstance(task, NodeTask)
    idx, _, y_true = predict(task, lambda batch: (batch.node_feat_float[..., :1],), online, lambda batch: batch)
    expected = sorted(r.item() for b in offline for r in b.target_id.reshape(-1))
    assert idx.tolist() == expected and not np.isnan(y_true).any()
    assert "takes edge lists; data.graph (sampler ego)" in refusal(path, "model=et-tfinance", "model_overrides={}")
    assert "data.graph.fanouts: must be 1 or more values, each >= 1, got []" in refusal(path, "data.graph.fanouts=[]")


def test_an_edge_batch_without_targets_names_the_missing_fields():
    from gtscale.loader.edge_batch import EdgeBatch
    from gtscale.train.node_task import target_scores

    batch = EdgeBatch(edge_index=torch.tensor([[0], [1]]), graph_index=torch.zeros(2, dtype=torch.long), num_graphs=1,
                      node_feat=torch.ones(2, 1, dtype=torch.long), target_id=torch.tensor([7]))
    with pytest.raises(ValueError, match=r"EdgeBatch needs target_rows \(the scored rows\) and target_id"):
        target_scores(batch, torch.zeros(2, 1))
