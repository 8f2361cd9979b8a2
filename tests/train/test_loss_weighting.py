"""Every labelled target of an optimizer step weighs the same, whichever rank and micro-batch it is in.

2 ranks × 2 accumulated micro-batches with node-budget batching (micro-batches of very different
graph counts) take one AdamW step under DeepSpeed ZeRO-2; the update must be the one a single process
computes from the mean loss over all graphs of the step. With eps ≫ |g|, AdamW's first update
−lr·g/(|g|+eps) is nearly linear in the gradient, so a different weighting shows in it."""

import numpy as np
import pytest
import torch

from launcher import logs, run_ranks, write_config

pytestmark = pytest.mark.slow

LR, EPS = 1.0, 1.0  # large steps: the float32 rounding of p + Δ stays far below the tolerance


def _step_batches(cfg, world_size: int, micro: int):
    """The micro-batches each rank trains on in step 1: the trainer's loaders (of the resolved
    `cfg`), rebuilt here."""
    from dataclasses import replace

    from gtscale.loader.stream import build_loader

    loader_cfg = replace(cfg.data.loader, num_workers=0)  # same stream: a worker's shards and seeds depend on its logical id only
    out = []
    for rank in range(world_size):
        loader = build_loader(cfg.data.shards, cfg.data.train_split, loader_cfg, train=True, rank=rank, world_size=world_size)
        batches = iter(loader)
        out += [next(batches) for _ in range(micro)]
    return out


def _adamw_first_update(model, loss) -> dict[str, np.ndarray]:
    model.zero_grad()
    loss.backward(retain_graph=True)
    return {name: (-LR * p.grad / (p.grad.abs() + EPS)).numpy() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def tpsa_morgan_shards(tmp_path_factory):
    """The bundled TPSA molecules with their Morgan bits (graph_feat), for task.aux_graph_feat."""
    from gtscale.cli import main

    out = tmp_path_factory.mktemp("tpsa_morgan")
    assert main(["shard", "nci-tpsa", "--out", str(out), "--shard-size", "2000", "--no-progress", "--lap-k", "0", "--graph-features", "morgan2048"]) == 0
    return out


def test_update_equals_mean_loss_over_all_graphs_of_the_step(tpsa_shards, tmp_path):
    check_first_update(tpsa_shards, tmp_path, feature_weight=None)


def test_feature_targets_weigh_every_graph_of_the_step_the_same(tpsa_morgan_shards, tmp_path):
    """The same with task.aux_graph_feat: its loss too is one mean over all graphs of the step."""
    check_first_update(tpsa_morgan_shards, tmp_path, feature_weight=0.5)


def check_first_update(shards, tmp_path, feature_weight: float | None) -> None:
    """2 ranks × 2 micro-batches take the step a single process computes from the step's mean loss
    (+ feature_weight × the mean feature loss over all its graphs, when set)."""
    from gtscale.format.manifest import load_manifest
    from gtscale.train.preflight import load_train_config
    from gtscale.train.export import export
    from gtscale.train.resolve import resolve_config
    from gtscale.train.task_model import build_task_model

    task = {} if feature_weight is None else {"aux_graph_feat": {"weight": feature_weight}}
    config = write_config(
        tmp_path / "c.yaml", shards, tmp_path / "run",
        data={"loader": {"batching": "node_budget", "node_budget": 160, "num_workers": 1}},
        optimizer={"lr": LR, "eps": EPS}, schedule={"total_steps": 1, "warmup_steps": 0, "min_lr": 0.0},
        deepspeed={"gradient_accumulation_steps": 2, "gradient_clipping": 0.0}, task=task,
    )
    assert run_ranks(2, [str(config)], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    trained = torch.load(export(tmp_path / "run", "latest", tmp_path / "export") / "model.pt", weights_only=True)

    manifest = load_manifest(shards)
    resolved = resolve_config(load_train_config(config, []), manifest)
    cfg = resolved.train
    torch.manual_seed(cfg.seed)  # the trainer's initial weights
    model = build_task_model(resolved, manifest)
    initial = {name: p.detach().clone().numpy() for name, p in model.named_parameters() if name in trained}
    batches = _step_batches(cfg, world_size=2, micro=2)
    graphs = [b.num_graphs for b in batches]
    assert len(set(graphs)) > 1, graphs  # node-budget batching: micro-batches of unequal graph counts

    model.train()
    errors, feature_sums = [], []
    for batch in batches:
        scores, aux = model(batch)
        target = (batch.y - cfg.task.target_shift) / cfg.task.target_scale
        errors.append((scores.float() - target).abs()[batch.y_mask])
        if feature_weight is not None:
            feature_sums.append(aux["graph_feat"] * batch.num_graphs)  # the micro-batch's mean × its graphs
    step_loss = torch.cat(errors).mean()  # one mean over every graph of the step
    per_micro_mean = torch.stack([e.mean() for e in errors]).mean()  # what the loop did before
    if feature_weight is not None:
        step_loss = step_loss + feature_weight * torch.stack(feature_sums).sum() / sum(graphs)
        per_micro_mean = per_micro_mean + feature_weight * torch.stack([f / g for f, g in zip(feature_sums, graphs)]).mean()
    expected = _adamw_first_update(model, step_loss)
    per_micro_mean = _adamw_first_update(model, per_micro_mean)

    scale = max(np.abs(u).max() for u in expected.values())
    for name in initial:
        got = trained[name].numpy() - initial[name]
        np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    # The test can tell the two weightings apart: the old one is far outside its tolerance.
    assert max(np.abs(per_micro_mean[n] - expected[n]).max() for n in initial) > 100 * 1e-5 * scale
