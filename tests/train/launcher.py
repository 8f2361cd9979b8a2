"""Start real training processes the way srun does: one OS process per rank with RANK, WORLD_SIZE,
LOCAL_RANK and a rendezvous address in the environment (no torchrun in between, so signals and exit
statuses reach the test directly)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

# The `data` section of a run whose ranks load in their own process: a rank with DataLoader workers
# first starts a fork server (~1.5 CPU-s of imports), which buys nothing where workers are not checked.
NO_WORKERS = {"loader": {"num_workers": 0}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(world_size: int, args: list[str], log_dir: Path, own_process_group: bool = False) -> list[subprocess.Popen]:
    """One process per rank. With `own_process_group`, the ranks (and the DataLoader workers they
    start) form a process group of their own, led by rank 0, as a SLURM job step's processes do:
    `os.killpg(procs[0].pid, sig)` then signals them all, as scancel does, and not the test."""
    port = free_port()
    procs = []
    log_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        env = os.environ | {
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        }
        log = open(log_dir / f"rank{rank}.log", "ab")
        group = {"process_group": procs[0].pid if procs else 0} if own_process_group else {}
        procs.append(subprocess.Popen([sys.executable, "-m", "gtscale.cli", "train", *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, **group))
    return procs


def wait_all(procs: list[subprocess.Popen], timeout: float = 300) -> list[int]:
    deadline = time.time() + timeout
    codes = []
    for p in procs:
        codes.append(p.wait(timeout=max(1, deadline - time.time())))
    return codes


def run_ranks(world_size: int, args: list[str], log_dir: Path, timeout: float = 300) -> list[int]:
    return wait_all(start_ranks(world_size, args, log_dir), timeout)


def logs(log_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(log_dir.glob("rank*.log")))


def metrics(run_dir: Path, split: str = "train") -> dict[int, dict]:
    """step → the last metrics row of `split` at that step (a resumed run repeats steps)."""
    rows = {}
    path = run_dir / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["split"] == split:
                rows[row["step"]] = row
    return rows


def adam_state_shares(run_dir: Path, model) -> list[float]:
    """Each rank's optimizer state as logged after the first step ("memory"), as a fraction of Adam's
    state for the whole model: two fp32 moments, 8 bytes per trainable parameter."""
    full = 8 * sum(p.numel() for p in model.parameters() if p.requires_grad)
    row = metrics(run_dir, "memory")[1]
    ranks = sorted(int(key.removeprefix("optimizer_state_bytes_rank")) for key in row if key.startswith("optimizer_state_bytes_rank"))
    return [row[f"optimizer_state_bytes_rank{r}"] / full for r in ranks]


def write_config(path: Path, shards: Path, run_dir: Path, **sections) -> Path:
    """A tiny-EGT training config on the bundled TPSA shards; `sections` replace top-level keys."""
    cfg = {
        "run_dir": str(run_dir),
        "seed": 0,
        "data": {"shards": str(shards), "loader": {"batching": "graphs", "batch_size": 16, "num_workers": 1, "shuffle_buffer": 100, "epoch_batches": 50}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "attention_dropout": 0.0, "num_virtual_nodes": 1},
        "task": {"loss": "l1", "metric": "mae", "evaluator": "pcqm4mv2", "head": {"hidden": [32]}, "target_shift": 60.0, "target_scale": 40.0},
        "optimizer": {"lr": 0.002},
        "schedule": {"total_steps": 20, "warmup_steps": 5, "min_lr": 0.0001},
        "deepspeed": {"zero_stage": 2, "precision": "fp32"},
        "checkpoint": {"every": 1000, "keep": 2},
        "eval": {"every": 0},
        "logging": {"every": 1, "tensorboard": False, "progress": False},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = _merge(cfg[key], value)
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
