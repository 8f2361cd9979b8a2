"""lockstep under a stop: one rank's evaluation loader dies (its workers got the job's SIGTERM);
every rank leaves the evaluation at the same batch instead of one waiting in a collective forever."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp


def _batches(rank: int):
    for i in range(5):
        if rank == 1 and i == 2:
            raise RuntimeError("DataLoader worker (pid 1234) is killed by signal: Terminated.")
        yield i


def _rank_main(rank: int, init_file: str, out_dir: str, stop_requested: bool) -> None:
    from gtscale.train.distributed_eval import EvaluationStopped, lockstep

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    seen, outcome = [], "finished"
    try:
        for item in lockstep(_batches(rank), filler=-1, stop_on_failure=lambda: stop_requested):
            seen.append(item)
    except EvaluationStopped:
        outcome = "stopped"
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"seen": seen, "outcome": outcome}))
    dist.destroy_process_group()


def test_every_rank_leaves_the_evaluation_together(tmp_path):
    mp.spawn(_rank_main, args=(str(tmp_path / "init"), str(tmp_path), True), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["outcome"] for r in ranks] == ["stopped", "stopped"]
    assert [r["seen"] for r in ranks] == [[0, 1], [0, 1]]

