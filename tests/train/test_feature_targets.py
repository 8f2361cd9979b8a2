"""task.aux_graph_feat: the shards' molecule-level features (Morgan bits, RDKit z-scores) as
pretraining targets of a second head, and data.loader.max_shards (a smaller corpus from the same
shards)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.train.feature_targets import FeatureTargets

MANIFEST = {"features": {"graph": {"generators": ["morgan2048", "rdkit2d"], "dim": 2051, "rdkit2d": {"names": ["a", "b", "c"]}}}}


def test_blocks_follow_the_generators_in_order():
    targets = FeatureTargets.from_manifest(MANIFEST, "s")
    assert targets.blocks == ((0, 2048, "bce"), (2048, 2051, "mse")) and targets.dim == 2051


def test_morgan_log_counts_are_regressed_not_classified():
    targets = FeatureTargets.from_manifest({"features": {"graph": {"generators": ["morgan2048counts", "morgan2048"], "dim": 4096}}}, "s")
    assert targets.blocks == ((0, 2048, "mse"), (2048, 4096, "bce"))


@pytest.mark.parametrize("graph, message", [
    (None, "holds no molecule-level features"),
    ({"generators": ["ecfp6"], "dim": 2048}, "unknown molecule-level feature generator 'ecfp6'"),
    ({"generators": ["morgan2048"], "dim": 2000}, "make 2048 values, its dim says 2000"),
])
def test_shards_without_readable_features_are_refused(graph, message):
    with pytest.raises(UserError, match=message):
        FeatureTargets.from_manifest({"features": {"graph": graph}} if graph else {}, "s")


def test_loss_averages_the_blocks_over_real_graphs_only():
    targets = FeatureTargets(((0, 3, "bce"), (3, 5, "mse")))
    scores, features = torch.randn(4, 5), torch.cat([torch.randint(0, 2, (4, 3)).float(), torch.randn(4, 2)], dim=1)
    real = torch.tensor([True, True, True, False])  # the last graph is a filler
    bce = F.binary_cross_entropy_with_logits(scores[:3, :3], features[:3, :3], reduction="none").mean(1)
    mse = ((scores[:3, 3:] - features[:3, 3:]) ** 2).mean(1)
    expected = ((bce + mse) / 2).mean()
    torch.testing.assert_close(targets.loss(scores, features, real), expected)
    scores[3] = 1e6  # a filler's scores change nothing
    torch.testing.assert_close(targets.loss(scores, features, real), expected)
    assert targets.loss(scores, features, torch.zeros(4, dtype=torch.bool)) == 0


@pytest.fixture(scope="module")
def morgan_shards(tmp_path_factory):
    """80 NCI molecules with TPSA and Morgan bits, 60/20/20, in shards of 20."""
    root = tmp_path_factory.mktemp("feature_targets")
    table = read_nci_tpsa()
    split = ["valid" if i % 5 == 3 else "test" if i % 5 == 4 else "train" for i in range(80)]
    pd.DataFrame({"smiles": table.smiles[:80], "tpsa": table.targets[:80, 0], "split": split}).to_csv(root / "m.csv", index=False)
    assert main(["shard", "smiles-csv", "--input", str(root / "m.csv"), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(root / "shards"), "--no-progress", "--lap-k", "0", "--svd-rank", "0", "--shard-size", "20",
                 "--graph-features", "morgan2048"]) == 0
    return root / "shards"


def config(shards, run_dir, **task):
    return {
        "run_dir": str(run_dir),
        "data": {"shards": str(shards), "loader": {"batching": "graphs", "batch_size": 8, "num_workers": 0}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1, "svd_rank": 0},
        "task": {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}, **task},
        "optimizer": {"lr": 1e-3}, "schedule": {"total_steps": 3, "warmup_steps": 1},
        "checkpoint": {"every": 1000}, "eval": {"every": 0}, "logging": {"every": 1, "tensorboard": False, "progress": False},
    }


def test_the_feature_head_learns_the_bits_and_the_task_head_does_not_read_them(morgan_shards, tmp_path):
    from gtscale.format.manifest import load_manifest
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.train.preflight import load_train_config
    from gtscale.train.resolve import resolve_config
    from gtscale.train.task_model import build_task_model

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config(morgan_shards, tmp_path / "run", aux_graph_feat={"weight": 0.5})))
    manifest = load_manifest(morgan_shards)
    resolved = resolve_config(load_train_config(tmp_path / "c.yaml", []), manifest)
    model = build_task_model(resolved, manifest)
    assert not resolved.model.get("head", {}).get("graph_features")  # targets, not inputs
    keys = resolved.train.data.loader.keys
    assert "graph_feat" in keys  # … which the loader reads all the same
    batch = next(iter(build_loader(manifest, "train", LoaderConfig(batching="graphs", batch_size=8, num_workers=0, keys=keys), train=True)))
    assert batch.graph_feat.shape == (8, 2048)

    model.train()
    scores, aux = model(batch)
    assert set(aux) == {"graph_feat"} and aux["graph_feat"] > 0
    aux["graph_feat"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.feature_head.parameters())
    model.eval()
    scores = model(batch)[0]
    batch.graph_feat = 1 - batch.graph_feat  # were the task head reading them, its scores would change
    torch.testing.assert_close(model(batch)[0], scores)


def test_a_run_with_feature_targets_trains_and_exports_without_the_feature_head(morgan_shards, tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config(morgan_shards, tmp_path / "run", aux_graph_feat={"weight": 1.0})))
    done = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(tmp_path / "c.yaml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
    state = torch.load(tmp_path / "export" / "model.pt", weights_only=True)
    assert state and not [k for k in state if k.startswith("feature_head.")]
    assert "graph_features" not in yaml.safe_load((tmp_path / "export" / "model.yaml").read_text())["head"]
    # predict is not asked to compute the features the model only learnt to predict
    assert "graph" not in json.loads((tmp_path / "export" / "export.json").read_text())["shards"]["features"]


def test_feature_targets_on_shards_without_features_are_refused_before_training(tpsa_shards, tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config(tpsa_shards, tmp_path / "run", aux_graph_feat={"weight": 1.0})))
    assert main(["train", str(tmp_path / "c.yaml")]) == 2
    assert f"task.aux_graph_feat: {tpsa_shards} holds no molecule-level features" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_max_shards_reads_the_first_shards_of_the_train_split_only(morgan_shards):
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader

    def samples(split, train, **kw):
        return build_loader(morgan_shards, split, LoaderConfig(batching="graphs", batch_size=8, num_workers=0, keys=["y"], **kw), train=train).num_samples

    assert samples("train", True, max_shards=1) == 20 and samples("train", True) == 48
    assert samples("valid", False, max_shards=1) == samples("valid", False) == 16
