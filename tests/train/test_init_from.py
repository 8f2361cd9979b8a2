"""init_from: the export's backbone replaces the new model's, the head stays new, and an export of
another shape is refused naming the key and both shapes."""

import pytest
import torch

from gtscale.errors import UserError
from gtscale.models import build_head, build_model, load_model_config
from gtscale.train.task_model import GraphTaskModel, load_backbone

SMALL = {"num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "num_virtual_nodes": 1, "svd_rank": 0}


def task_model(seed: int, outputs: int, **overrides) -> GraphTaskModel:
    torch.manual_seed(seed)
    cfg = {**load_model_config("egt-small"), **SMALL, **overrides}
    backbone = build_model(cfg)
    return GraphTaskModel(backbone, build_head({**cfg["head"], "num_outputs": outputs, "hidden": [16]}, backbone))


def test_head_swap_keeps_every_backbone_tensor_bit_identical(tmp_path, capsys):
    pretrained = task_model(seed=0, outputs=5)
    torch.save(pretrained.state_dict(), tmp_path / "model.pt")
    fresh = task_model(seed=1, outputs=1)  # another head (1 output instead of 5), other random weights
    head_before = {k: v.clone() for k, v in fresh.head.state_dict().items()}

    assert load_backbone(fresh, str(tmp_path / "model.pt")) == len(pretrained.backbone.state_dict())
    for key, value in pretrained.backbone.state_dict().items():
        assert torch.equal(fresh.backbone.state_dict()[key], value), key
    for key, value in fresh.head.state_dict().items():  # the new head keeps its own initialisation
        assert torch.equal(value, head_before[key]), key
    line = capsys.readouterr().out
    assert f"loaded {len(pretrained.backbone.state_dict())} backbone tensors" in line
    assert f"newly initialised {len(fresh.head.state_dict())} (head." in line
    assert f"dropped {len(pretrained.head.state_dict())} from the file" in line


def test_shape_mismatch_names_the_key_and_both_shapes(tmp_path):
    torch.save(task_model(seed=0, outputs=1, node_width=48).state_dict(), tmp_path / "model.pt")
    with pytest.raises(UserError, match=r"backbone\.\S+ has shape \(\d+(, \d+)*\) in the file but \(\d+(, \d+)*\) in this model") as err:
        load_backbone(task_model(seed=0, outputs=1), str(tmp_path / "model.pt"))
    assert "48" in str(err.value) and "32" in str(err.value)


def test_missing_backbone_tensor_is_named(tmp_path):
    state = task_model(seed=0, outputs=1).state_dict()
    dropped = next(k for k in state if k.startswith("backbone."))
    del state[dropped]
    torch.save(state, tmp_path / "model.pt")
    with pytest.raises(UserError, match=f"{dropped} missing from the file"):
        load_backbone(task_model(seed=0, outputs=1), str(tmp_path / "model.pt"))


def test_fine_tuning_with_graph_features_from_an_export_without_them(tmp_path, capsys):
    """The export's backbone loads as is; the head, which now also reads graph_feat, is new (its
    feature columns included), and the model runs on batches that carry the features."""
    import sys
    from dataclasses import replace
    from pathlib import Path

    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
    from model_fixtures import TINY_EGT, make_batch, random_graph

    from gtscale.models import build_head, build_model
    from gtscale.train.task_model import GraphTaskModel, load_backbone

    torch.manual_seed(0)
    plain = build_model(TINY_EGT)
    pretrained = GraphTaskModel(plain, build_head({"kind": "graph", "num_outputs": 3}, plain))
    torch.save(pretrained.state_dict(), tmp_path / "model.pt")
    backbone = build_model(TINY_EGT)
    tuned = GraphTaskModel(backbone, build_head({"kind": "graph", "num_outputs": 1, "graph_features": 4}, backbone))
    assert load_backbone(tuned, str(tmp_path / "model.pt")) == len(plain.state_dict())
    assert "newly initialised 2 (head.mlp.layers.0.weight, head.mlp.layers.0.bias)" in capsys.readouterr().out
    for key, value in plain.state_dict().items():
        assert torch.equal(tuned.backbone.state_dict()[key], value)
    assert tuned.head.mlp.layers[0].in_features == plain.graph_dim + 4
    rng = np.random.default_rng(0)
    batch = replace(make_batch([random_graph(rng, 5), random_graph(rng, 8)]), graph_feat=torch.randn(2, 4))
    scores, _ = tuned.eval()(batch)
    assert scores.shape == (2, 1) and torch.isfinite(scores).all()


def test_the_shipped_backbone_starts_a_fine_tuning_run_by_name(tpsa_shards, tmp_path):
    """init_from: moses-egt (the fine-tuning config's default) loads the backbone the package ships,
    with no export of one's own: every backbone tensor from gtscale/pretrained/moses-egt."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from gtscale.models.export import read_export
    from gtscale.models.pretrained import ROOT

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", "configs/tasks/moleculeace-egt-finetune.yaml", f"data.shards={tpsa_shards}",
                           f"run_dir={tmp_path / 'run'}", "schedule.total_steps=2", "schedule.warmup_steps=1", "eval.every=0", "checkpoint.every=1000",
                           "data.loader.num_workers=0", "logging.progress=false", "logging.tensorboard=false"],
                          capture_output=True, text=True, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = re.search(r"init_from (\S+): loaded (\d+) backbone tensors", done.stdout + done.stderr)
    shipped = read_export(ROOT / "moses-egt").state
    assert loaded and Path(loaded[1]) == ROOT / "moses-egt" / "model.pt"
    assert int(loaded[2]) == len([k for k in shipped if k.startswith("backbone.")]) > 0
