"""Pretrain under ZeRO-3 → export → fine-tune: each rank's share of the optimizer state, DeepSpeed's
ZeRO consolidation, weights_only loading, init_from."""

import pytest
import torch
import yaml

from launcher import NO_WORKERS, adam_state_shares, logs, metrics, run_ranks, write_config

pytestmark = pytest.mark.slow


def _pains_sample(path, n: int):
    """The first n WEHI molecules with their PAINS labels (1 in 5 valid, 1 in 5 test) as a CSV."""
    import csv

    from gtscale.prep.sources.bundled import WEHI, pains_labels

    with open(WEHI) as f:
        smiles = [row[0] for _, row in zip(range(n), csv.reader(f))]
    labels = pains_labels(smiles)
    splits = ["valid" if i % 5 == 3 else "test" if i % 5 == 4 else "train" for i in range(n)]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([("smiles", "pains", "split"), *zip(smiles, labels.tolist(), splits)])
    return path


def test_export_then_finetune_on_a_classification_task(tpsa_shards, tmp_path):
    from gtscale.cli import main
    from gtscale.models import build_head, build_model
    from gtscale.train.task_model import GraphTaskModel

    cfg = write_config(tmp_path / "pre.yaml", tpsa_shards, tmp_path / "pre", schedule={"total_steps": 6, "warmup_steps": 2}, deepspeed={"zero_stage": 3},
                       data=NO_WORKERS)
    assert run_ranks(2, [str(cfg)], tmp_path / "log1") == [0, 0], logs(tmp_path / "log1")
    assert main(["export", str(tmp_path / "pre"), "--tag", "latest"]) == 0
    state = torch.load(tmp_path / "pre" / "export" / "model.pt", weights_only=True)
    model_cfg = yaml.safe_load((tmp_path / "pre" / "export" / "model.yaml").read_text())
    backbone = build_model(model_cfg)
    model = GraphTaskModel(backbone, build_head(model_cfg["head"], backbone))
    model.load_state_dict(state, strict=True)  # ZeRO-3 partitions gathered into the full model
    shares = adam_state_shares(tmp_path / "pre", model)
    assert len(shares) == 2 and all(0.5 <= s <= 0.55 for s in shares), shares  # ZeRO-3: half of Adam's state on each rank (+ padding)
    assert all(v.dtype == torch.float32 for v in state.values())

    # Fine-tune on a PAINS classification sample from the exported backbone: 600 WEHI molecules,
    # labelled as `gtscale shard wehi-pains` labels all 10,000 (which costs ~40 s of PAINS matching).
    pains = tmp_path / "pains"
    assert main(["shard", "smiles-csv", "--input", str(_pains_sample(tmp_path / "pains.csv", 600)), "--target-columns", "pains",
                 "--task-type", "graph_classification", "--split-column", "split", "--out", str(pains), "--no-progress", "--lap-k", "0"]) == 0
    fine = write_config(
        tmp_path / "fine.yaml", pains, tmp_path / "fine", init_from=str(tmp_path / "pre" / "export" / "model.pt"),
        task={"loss": "bce", "metric": "rocauc", "evaluator": "ogbg-molhiv"}, schedule={"total_steps": 4, "warmup_steps": 1, "min_lr": 0.0},
        optimizer={"lr": 0.0}, eval={"every": 4}, data=NO_WORKERS,
    )
    assert run_ranks(2, [str(fine)], tmp_path / "log2") == [0, 0], logs(tmp_path / "log2")
    assert main(["export", str(tmp_path / "fine"), "--tag", "latest"]) == 0
    tuned = torch.load(tmp_path / "fine" / "export" / "model.pt", weights_only=True)
    for key, value in state.items():
        if key.startswith("backbone."):  # lr 0: the backbone is exactly the pretrained one
            assert torch.equal(tuned[key], value), key
    valid = metrics(tmp_path / "fine", "valid")[4]
    assert 0.0 <= valid["rocauc"] <= 1.0 and valid["samples"] == 120
