"""The task model in one process: EGT's auxiliary distance objective is wired into the loss."""

import torch

from launcher import write_config


def test_aux_distance_loss_trains_its_head_and_is_off_in_eval(tpsa_shards, tmp_path):
    from gtscale.format.manifest import load_manifest
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.train.preflight import load_train_config
    from gtscale.train.resolve import resolve_config
    from gtscale.train.tasks import task_loss
    from gtscale.train.task_model import build_task_model

    cfg_path = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", model_overrides={
        "num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "num_virtual_nodes": 1, "output_edges": True,
    }, task={"aux_distance": {"max_hops": 4, "weight": 0.5}})
    manifest = load_manifest(tpsa_shards)
    resolved = resolve_config(load_train_config(cfg_path, []), manifest)
    cfg = resolved.train
    torch.manual_seed(0)
    model = build_task_model(resolved, manifest)
    loader = build_loader(tpsa_shards, "valid", LoaderConfig(batching="graphs", batch_size=8, num_workers=0, keys=cfg.data.loader.keys), train=False)
    batch = next(iter(loader))

    model.train()
    scores, aux = model(batch)
    assert set(aux) == {"distance"} and torch.isfinite(aux["distance"]) and aux["distance"] > 0
    (task_loss(scores, batch.y, batch.y_mask, cfg.task) + aux["distance"]).backward()
    grads = [p.grad for p in model.distance_head.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)

    model.eval()
    assert model(batch)[1] == {}  # evaluation scores the task only
