"""`gtscale bench train`: does the input pipeline keep up with training?

Side by side in one process, the same Trainer.train_step (DeepSpeed engine: forward, backward,
optimizer step) is fed
  - by the real loader (shards → decode → bucket → collate, in DataLoader workers), and
  - from batches collated beforehand and held in memory (the model alone),
in interleaved rounds; the ratio loop / model-alone is what the pipeline costs. Target ≥ 0.90.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _warm_up(trainer, batches, steps: int) -> int:
    """Steps before the timed rounds: 5 (workers started, buffers filled, allocator settled), and with
    a compiled model on until `steps` steps in a row met no new batch shape, at most 20 × `steps`:
    each new shape (a size bucket) compiles once, minutes on a CPU, which is not what a step of the
    loop costs, and a bucket first met inside a round was timed with its compilation. Returns the
    steps taken."""
    for _ in range(5):
        trainer.train_step(batches)
    taken, quiet = 5, 0
    while trainer.cfg.compile.enabled and quiet < steps and taken < 20 * steps:
        before = trainer.batch_shapes
        trainer.train_step(batches)
        taken, quiet = taken + 1, 0 if trainer.batch_shapes > before else quiet + 1
    return taken


def _rate(trainer, batches, steps: int) -> float:
    start = time.perf_counter()
    graphs = sum(trainer.train_step(batches).graphs for _ in range(steps))
    return graphs / (time.perf_counter() - start)


def bench_train(*, config: str = "configs/tasks/nci-tpsa.yaml", shards: str | None = None, steps: int = 40, rounds: int = 3, workers: int = 1,
                overrides: list[str] = (), json_path: str | None = None) -> int:
    """Training-loop graphs/s of `config` against the model alone on pre-collated batches, median of `rounds`."""
    from gtscale.bench.report import claim_json, write_json

    claim_json(json_path)
    from gtscale.train.launch_env import rendezvous_env
    from gtscale.train.preflight import load_train_config
    from gtscale.train.trainer import Trainer

    import torch

    os.environ.update(rendezvous_env(os.environ)[0])  # one process unless a launcher started this
    # Cores are shared out as a launcher would: loader workers get theirs, the model the rest.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))
    with tempfile.TemporaryDirectory() as tmp:
        if shards is None:
            shards = str(Path(tmp) / "shards")
            subprocess.run([sys.executable, "-m", "gtscale.cli", "shard", "nci-tpsa", "--out", shards, "--shard-size", "1000", "--no-progress"],
                           check=True)
        overrides = [f"data.shards={shards}", f"run_dir={tmp}/run", f"data.loader.num_workers={workers}",
                     "logging.progress=false", "logging.tensorboard=false", *overrides]
        trainer = Trainer(load_train_config(config, overrides))
        stream = trainer._train_batches()
        warmup = _warm_up(trainer, stream, steps)
        loop, alone = [], []
        for _ in range(rounds):
            loop.append(_rate(trainer, stream, steps))
            cached = [next(stream) for _ in range(steps)]
            alone.append(_rate(trainer, iter(cached), steps))
        result = {
            "config": config,
            "model": trainer.resolved.model.get("name"),
            "parameters": sum(p.numel() for p in trainer.engine.module.parameters()),
            "loader_workers": workers,
            "torch_threads": torch.get_num_threads(),
            "steps_per_round": steps,
            "rounds": rounds,
            "warmup_steps": warmup,
            "compiled": trainer.cfg.compile.enabled,
            "batch_shapes": trainer.batch_shapes if trainer.cfg.compile.enabled else None,
            "loop_graphs_per_s": statistics.median(loop),
            "model_alone_graphs_per_s": statistics.median(alone),
        }
        result["loop_vs_model_alone"] = result["loop_graphs_per_s"] / result["model_alone_graphs_per_s"]
    print(f"{result['model']} ({result['parameters']:,} parameters), {workers} loader worker(s), {result['torch_threads']} torch thread(s), "
          f"median of {rounds} rounds × {steps} steps after {warmup} warm-up steps"
          + (f" (compiled: {result['batch_shapes']} batch shapes met)" if result["compiled"] else ""))
    print(f"{'mode':<34}{'graphs/s':>10}")
    print(f"{'training loop (loader → step)':<34}{result['loop_graphs_per_s']:>10.0f}")
    print(f"{'model alone (pre-collated)':<34}{result['model_alone_graphs_per_s']:>10.0f}")
    print(f"loop / model alone: {result['loop_vs_model_alone']:.2f} (target ≥ 0.90)")
    write_json(json_path, result, "train")
    return 0
