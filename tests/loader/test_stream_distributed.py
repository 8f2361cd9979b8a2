"""Two real ranks (gloo) × two DataLoader workers each: evaluation sees every sample exactly once,
lockstep equalises forward passes, predictions gather by idx, training ranks yield equal counts."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shard_fixtures import SHARD_SIZES

WORLD_SIZE = 2


def _rank_main(rank: int, init_file: str, root: str, out_dir: str) -> None:
    from gtscale.format import schema
    from gtscale.train.distributed_eval import gather_predictions, lockstep
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60))
    # Processes made by mp.spawn would spawn their DataLoader workers too (seconds each on a busy
    # machine); torchrun-started ranks fork them, as here.
    config = LoaderConfig(
        node_budget=256, num_workers=2, shuffle_buffer=60, shuffle_initial=10, keys=[schema.SPD, schema.SVD_PE, schema.Y], start_method="fork"
    )
    result: dict = {}

    evaluation = build_loader(root, "valid", config, train=False)  # rank and world size from torch.distributed
    local = list(evaluation)
    result["eval_idx"], result["eval_batches"] = [int(i) for batch in local for i in batch.idx], len(local)
    idx, predictions, steps = [], [], 0
    for batch in lockstep(evaluation, evaluation.filler_batch()):
        steps += 1
        idx.append(batch.idx)
        predictions.append(batch.y[:, 0])  # the "model" predicts the first target exactly
    result["lockstep_steps"] = steps
    gathered_idx, gathered = gather_predictions(idx, predictions, expected=evaluation.num_samples)
    result["gathered_idx"], result["gathered"] = gathered_idx.tolist(), gathered.tolist()

    training = build_loader(root, "train", config, train=True)
    result["train_len"] = len(training)
    result["train_counts"] = []
    for _ in range(2):
        count = 0
        for _batch in training:
            flag = torch.ones(1)
            dist.all_reduce(flag)  # a collective per step: unequal counts would time out here
            count += 1
        result["train_counts"].append(count)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_two_ranks_two_workers(nci_shards, nci_by_idx, tmp_path):
    mp.spawn(_rank_main, args=(str(tmp_path / "init"), str(nci_shards), str(tmp_path)), nprocs=WORLD_SIZE, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]

    start = sum(SHARD_SIZES["train"])
    valid = list(nci_by_idx)[start : start + sum(SHARD_SIZES["valid"])]
    seen = [i for r in ranks for i in r["eval_idx"]]
    assert sorted(seen) == sorted(valid), "every validation sample exactly once across 2 ranks x 2 workers"
    assert all(r["eval_idx"] for r in ranks), "both ranks took part"

    steps = {r["lockstep_steps"] for r in ranks}
    assert steps == {max(r["eval_batches"] for r in ranks)}
    for r in ranks:
        assert r["gathered_idx"] == sorted(valid)
        assert r["gathered"] == [float(nci_by_idx[i]["y"][0]) for i in sorted(valid)]

    assert ranks[0]["train_counts"] == ranks[1]["train_counts"] == [ranks[0]["train_len"]] * 2
    assert ranks[0]["train_len"] == ranks[1]["train_len"] > 0
