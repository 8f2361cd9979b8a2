"""`launch/gpu-check`: does the trainer hold up on a machine with GPUs? Three checks, one script:

1. train: the nci-tpsa task for 50 steps on every GPU (torchrun, one process per GPU), NCCL,
   DeepSpeed ZeRO-2 in bf16 (the `zero2` preset); the run's backend is read back from its config.yaml;
2. resume: the same run killed (SIGKILL to the whole launcher group) after its step-20 checkpoint,
   resumed with `--resume auto`, and its losses of steps 21-50 compared with the uninterrupted run's;
   steps 1-20 of the two runs (both from scratch) give the run-to-run spread of the kernels to judge by;
3. bench: `gtscale bench model` in bf16 for egt-small, egt-medium and graphormer-base: graphs/s,
   peak CUDA memory and MFU (model FLOPs per second over the GPU's dense bf16 peak).

`--compile` runs the same checks with the model compiled: the training runs with compile.enabled
and one shape per size bucket (data.loader.pad_to_bucket) in three wide buckets, so that a short run
compiles six times (three shapes, training and evaluation mode), not once per batch; the inductor
cache is in --out, and the resumed runs read it back. The benchmarks get eager and compiled rows.

Every step goes through the command line a user types (`gtscale shard`, `torchrun … gtscale.cli
train`, `gtscale bench model`), so the script breaks when the CLI drifts. `--cpu` runs the same flow
on 2 CPU processes over gloo with a few steps and a tiny benchmark: what the test suite runs.
Sized for one H200 in under 8 minutes; prints a summary and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gtscale.config import CONFIG_ROOT

#: The models of the benchmark step.
BENCH_MODELS = ("egt-small", "egt-medium", "graphormer-base")


@dataclass
class Plan:
    """What one gpu-check run does: step counts, where it kills, what it benchmarks."""

    processes: int
    steps: int
    checkpoint_every: int
    kill_after: int  # SIGKILL once this step is logged (and the checkpoint before it is complete)
    rtol: float  # resumed vs uninterrupted losses
    bench_models: tuple[str, ...]
    bench_args: tuple[str, ...]
    env: dict[str, str]
    train_overrides: tuple[str, ...] = ()  # config overrides of every training launch


#: --compile's size buckets (exclusive upper bounds): NCI's molecules have 1..122 heavy atoms, most
#: of them 7..30. A check needs few shapes, not little padding: each shape is a compilation.
CHECK_BUCKETS = "[16,32,128]"


def compile_overrides(cache_dir: Path) -> tuple[str, ...]:
    """The training overrides of `--compile`: the compiled model, one batch shape per bucket."""
    return ("compile.enabled=true", f"compile.cache_dir={cache_dir}", "data.loader.pad_to_bucket=true",
            f"data.loader.bucket_boundaries={CHECK_BUCKETS}")


def plan(cpu: bool, models: tuple[str, ...], compile: bool = False, out: Path = Path("runs")) -> Plan:
    p = _plan(cpu, models)
    if compile:
        p.bench_args += ("--compile",)
        p.train_overrides = compile_overrides(out / "inductor")
    return p


def _plan(cpu: bool, models: tuple[str, ...]) -> Plan:
    if cpu:
        # Everything on the CPU (even on a GPU machine): gloo, deterministic kernels, exact resume.
        return Plan(2, 6, 3, 4, 1e-6, models, ("--device", "cpu", "--batch-size", "2", "--steps", "1", "--warmup", "0", "--threads", "1"),
                    {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise SystemExit("gpu-check: no CUDA device visible (use --cpu to exercise the flow on the CPU)")
    # bf16 kernels with atomics (index_add, scatter) are not bitwise reproducible: judge the resumed
    # losses against a tolerance, with the run-to-run spread of steps 1..checkpoint printed beside it.
    # Batch 256 molecules per GPU: the per-GPU batch of EGT's PCQM4Mv2 recipe (2,048 over 8 GPUs); a
    # batch of 32 small molecules measures kernel-launch overhead, not the model.
    return Plan(gpus, 50, 20, 25, 1e-2, models, ("--device", "cuda", "--batch-size", "256", "--steps", "20", "--warmup", "5"), {})


# --- the loss comparison -------------------------------------------------------------------------

def train_losses(run_dir: Path) -> dict[int, float]:
    """step → loss of a run's metrics.jsonl (the last row of a step: a resumed run repeats steps)."""
    rows = {}
    path = run_dir / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("split") == "train" and row.get("loss") is not None:
                rows[int(row["step"])] = float(row["loss"])
    return rows


def last_train_row(run_dir: Path) -> dict:
    """The last training row of a run's metrics.jsonl ({} when none)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return next((r for r in reversed(rows) if r.get("split") == "train"), {})


def compile_note(run_dir: Path) -> str:
    """'; N compiled graphs for S batch shapes, H inductor cache hits' of a compiled run ('' for an eager one)."""
    row = last_train_row(run_dir)
    if "compiled_graphs" not in row:
        return ""
    return f"; {row['compiled_graphs']:.0f} compiled graphs for {row['batch_shapes']:.0f} batch shapes, {row['compile_cache_hits']:.0f} inductor cache hits"


def max_relative_difference(a: dict[int, float], b: dict[int, float], steps: range) -> tuple[float, int | None]:
    """Largest |a − b| / max(|b|, tiny) over `steps`, and its step; inf when a step is missing."""
    diffs = {}
    for step in steps:
        if step not in a or step not in b:
            return float("inf"), step
        diffs[step] = abs(a[step] - b[step]) / max(abs(b[step]), 1e-12)
    if not diffs:
        return 0.0, None
    worst = max(diffs, key=diffs.get)
    return diffs[worst], worst


# --- the processes -------------------------------------------------------------------------------

def _env(extra: dict[str, str]) -> dict[str, str]:
    return os.environ | {"PYTHONUNBUFFERED": "1"} | extra


def train_command(p: Plan, config: str, shards: Path, run_dir: Path, resume: bool) -> list[str]:
    overrides = [
        f"data.shards={shards}", f"run_dir={run_dir}", "deepspeed=zero2", f"schedule.total_steps={p.steps}",
        f"schedule.warmup_steps={max(1, p.steps // 10)}", f"checkpoint.every={p.checkpoint_every}", "eval.every=0",
        "logging.every=1", "logging.progress=false", "logging.tensorboard=false", *p.train_overrides,
    ]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p.processes}",
           "-m", "gtscale.cli", "train", config, *overrides]
    return cmd + (["--resume", "auto"] if resume else [])


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it, parents first (Linux /proc). torchrun starts each rank in a
    session of its own: a kill of the launcher, or of its process group, leaves the ranks running."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # "pid (name) state ppid ..."
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop(0))
        todo += children.get(tree[-1], [])
    return tree


def end_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launch and every process under it (ranks, their loader workers); reap it."""
    for pid in process_tree(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_logged(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> int:
    """Run `cmd` to its end, its output to `log`. Past `timeout` seconds, or when gpu-check itself
    is stopped, it is ended with every process under it (no rank left holding a GPU); a timeout
    returns 124, as `timeout` does."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124
        finally:
            if proc.poll() is None:
                end_tree(proc)


def run_and_kill(cmd: list[str], log: Path, env: dict[str, str], run_dir: Path, checkpoint_step: int, kill_after: int, timeout: float) -> int:
    """Start the run; SIGKILL it with every process under it (launcher, ranks, loader workers) once
    step `kill_after` is logged and the step-`checkpoint_step` checkpoint is complete. Returns the
    last step logged before the kill."""
    marker = run_dir / "checkpoints" / f"step-{checkpoint_step:08d}" / "COMPLETE"
    deadline = time.monotonic() + timeout
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            while not (marker.is_file() and max(train_losses(run_dir), default=0) >= kill_after):
                if proc.poll() is not None:
                    raise RuntimeError(f"the run ended (status {proc.returncode}) before step {kill_after}; see {log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"step {kill_after} not reached in {timeout:.0f} s; see {log}")
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                end_tree(proc)
    return max(train_losses(run_dir))


def backend_of(run_dir: Path) -> str:
    import yaml

    return str(yaml.safe_load((run_dir / "config.yaml").read_text()).get("backend", "?"))


# --- the script ----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("runs") / time.strftime("gpu-check-%Y%m%d-%H%M%S"), help="work folder (shards, runs, logs)")
    parser.add_argument("--shards", type=Path, default=None, help="nci-tpsa shards to reuse (default: shard them into --out)")
    parser.add_argument("--config", default=str(CONFIG_ROOT / "tasks" / "nci-tpsa.yaml"), help="the training task (default: nci-tpsa)")
    parser.add_argument("--bench-models", nargs="*", default=list(BENCH_MODELS), help="models for `gtscale bench model` (none: skip)")
    parser.add_argument("--cpu", action="store_true", help="the same flow on 2 CPU processes (gloo), few steps: for tests")
    parser.add_argument("--timeout", type=float, default=240, help="seconds allowed per training launch")
    parser.add_argument("--compile", action="store_true", help="train with compile.enabled (and pad_to_bucket); bench eager and compiled")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launch/gpu-check", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    # Stopped from outside (launch/gpu-speed's `timeout`): unwind, so that every launch under way is
    # ended with its ranks (run_logged, run_and_kill) instead of left running on the GPUs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = args.out.resolve()
    p = plan(args.cpu, tuple(args.bench_models), args.compile, out)
    env = _env(p.env)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    failures = []

    shards = args.shards
    if shards is None:
        shards = out / "shards"
        cmd = [sys.executable, "-m", "gtscale.cli", "shard", "nci-tpsa", "--out", str(shards), "--workers", str(os.cpu_count() or 1), "--no-progress"]
        if run_logged(cmd, out / "shard.log", env, 600) != 0:
            print(f"gpu-check: sharding failed; see {out / 'shard.log'}")
            return 1

    ref, cut = out / "reference", out / "resumed"
    print(f"[1/3] train {args.config}: {p.steps} steps on {p.processes} process(es), ZeRO-2 bf16{', compiled' if args.compile else ''}", flush=True)
    code = run_logged(train_command(p, args.config, shards, ref, resume=False), out / "reference.log", env, args.timeout)
    reference = train_losses(ref)
    if code != 0 or max(reference, default=0) != p.steps:
        print(f"      FAILED: exit {code}{' (past --timeout)' if code == 124 else ''}, {max(reference, default=0)} steps logged; see {out / 'reference.log'}")
        return 1
    print(f"      backend {backend_of(ref)}; loss step 1 {reference[1]:.4f} → step {p.steps} {reference[p.steps]:.4f}{compile_note(ref)}")

    print(f"[2/3] kill after step {p.kill_after} (checkpoint at {p.checkpoint_every}), resume, compare", flush=True)
    try:
        killed_at = run_and_kill(train_command(p, args.config, shards, cut, resume=True), out / "resumed.log", env, cut, p.checkpoint_every, p.kill_after, args.timeout)
    except RuntimeError as err:
        print(f"      FAILED: {err}")
        return 1
    code = run_logged(train_command(p, args.config, shards, cut, resume=True), out / "resumed.log", env, args.timeout)
    resumed = train_losses(cut)
    spread, _ = max_relative_difference(resumed, reference, range(1, p.checkpoint_every + 1))
    diff, step = max_relative_difference(resumed, reference, range(p.checkpoint_every + 1, p.steps + 1))
    ok = code == 0 and diff <= p.rtol
    print(f"      killed at step {killed_at}; resumed exit {code}; steps {p.checkpoint_every + 1}-{p.steps}: max relative loss "
          f"difference {diff:.2e} (step {step}; tolerance {p.rtol:.0e}); run-to-run spread of steps 1-{p.checkpoint_every}: {spread:.2e}"
          f"{compile_note(cut)} — {'ok' if ok else 'FAILED'}")
    if not ok:
        failures.append("resume")

    print(f"[3/3] gtscale bench model --precision bf16: {', '.join(p.bench_models) or 'skipped'}", flush=True)
    for model in p.bench_models:
        cmd = [sys.executable, "-m", "gtscale.cli", "bench", "model", "--model", model, "--precision", "bf16", *p.bench_args,
               "--json", str(out / f"bench-{model}.json")]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            print(f"      {model}: FAILED\n{result.stdout}{result.stderr}")
            failures.append(f"bench {model}")
            continue
        for row in json.loads((out / f"bench-{model}.json").read_text())["results"]:
            mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "- (no peak known for this device)"
            print(f"      {model:<16} {row['implementation']:<9}{row['graphs_per_s']:>9.1f} graphs/s  peak {row['peak_mem_mb']:>8.0f} MiB  "
                  f"{row['achieved_tflops']:>7.2f} TFLOP/s  MFU {mfu}")
    print(f"gpu-check: {'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'} in {time.monotonic() - started:.0f} s; outputs in {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
