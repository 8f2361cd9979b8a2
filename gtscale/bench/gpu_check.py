"""`launch/gpu-check --budget SECONDS --out DIR`: a GPU node's health and speed within a time budget.

(The command line is cli/gpu_check.py.)

Steps, in this order; each gets at most its share of the budget and what is left of it, a step
that would start with less than a minute left is skipped and reported, and a failed step does not
stop the ones after it:

1. shard: the bundled nci-tpsa molecules (`--shards` reuses a shard folder);
2. train: nci-tpsa for 50 steps on every GPU (torchrun, one process per GPU), NCCL, DeepSpeed
   ZeRO-2 in bf16 (the `zero2` preset); the run's backend is read back from its config.resolved.yaml;
3. resume: the same run killed (every process under the launcher) after its step-20 checkpoint,
   resumed with `--resume auto`, and its losses of steps 21-50 compared with the uninterrupted run's;
   steps 1-20 of the two runs (both from scratch) give the run-to-run spread of the kernels to judge by;
4. bench: `gtscale bench model` in bf16 for each `--bench-models` model and `--batch` size (default
   egt-small, egt-medium and graphormer-base at 256 molecules per GPU): eager, compiled and compiled
   with CUDA graphs (mode reduce-overhead) rows with graphs/s, peak memory and MFU (model FLOPs per
   second over the GPU's dense bf16 peak); the first batch size with `--profile`, one more step of
   each row under torch.profiler (its costliest CUDA kernels).

`--compile` trains with the model compiled (compile.enabled, one batch shape per size bucket in
three wide buckets: a short run compiles six times, not once per batch); the inductor cache is in
DIR, and the resumed run reads it back.

Every step goes through the command line a user types (`gtscale shard`, `torchrun … gtscale.cli
train`, `gtscale bench model`), so the check breaks when the CLI drifts. DIR (new or empty) gets
summary.md (every step, the training report, the throughput table), bench.json (every figure),
profile.md (the kernel tables) and a log per step, beside the shards, runs and inductor cache.
`--cpu` runs the same flow on 2 CPU processes over gloo with a few steps and a tiny eager
benchmark: what the test suite runs. Exit status 0 when every step passed, 1 otherwise, 2 for bad
arguments or no CUDA device.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gtscale.bench.gpu_report import StepRecord, write_report
from gtscale.errors import UserError

#: The models of the benchmark step.
BENCH_MODELS = ("egt-small", "egt-medium", "graphormer-base")

#: A step that would start with less than this many seconds of the budget left is skipped.
MIN_STEP_S = 60

#: Each step's largest share of the whole budget (the benchmarks share what the others left).
SHARE = {"shard": 0.2, "train": 0.25, "resume": 0.25}


@dataclass
class Plan:
    """What one gpu-check run does: step counts, where it kills, what it benchmarks."""

    device: str
    processes: int
    steps: int
    checkpoint_every: int
    kill_after: int  # SIGKILL once this step is logged (and the checkpoint before it is complete)
    rtol: float  # resumed vs uninterrupted losses
    bench_args: tuple[str, ...]
    batches: tuple[int, ...]
    env: dict[str, str]
    train_overrides: tuple[str, ...] = ()  # config overrides of every training launch


#: --compile's size buckets (exclusive upper bounds): NCI's molecules have 1..122 heavy atoms, most
#: of them 7..30. A check needs few shapes, not little padding: each shape is a compilation.
CHECK_BUCKETS = "[16,32,128]"


def compile_overrides(cache_dir: Path) -> tuple[str, ...]:
    """The training overrides of `--compile`: the compiled model, one batch shape per bucket."""
    return ("compile.enabled=true", f"compile.cache_dir={cache_dir}", "data.loader.pad_to_bucket=true",
            f"data.loader.bucket_boundaries={CHECK_BUCKETS}")


def plan(cpu: bool, compile: bool = False, out: Path = Path("runs"), batches: tuple[int, ...] = ()) -> Plan:
    """The run's plan: `--cpu`'s small flow, else every visible GPU; `batches` replaces the default
    benchmark batch sizes."""
    cache = ("--compile-cache", str(out / "inductor"))
    if cpu:
        # Everything on the CPU (even on a GPU machine): gloo, deterministic kernels, exact resume; a
        # compiled CPU benchmark row takes minutes, so it runs only with --compile.
        p = Plan("cpu", 2, 6, 3, 4, 1e-6, ("--device", "cpu", "--steps", "1", "--warmup", "0", "--threads", "1", *cache), batches or (2,),
                 {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
        if compile:
            p.bench_args += ("--compile",)
    else:
        import torch

        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise UserError("no CUDA device visible (--cpu runs the same flow on the CPU)")
        # bf16 kernels with atomics (index_add, scatter) are not bitwise reproducible: judge the resumed
        # losses against a tolerance, with the run-to-run spread of steps 1..checkpoint printed beside it.
        # Batch 256 molecules per GPU: the per-GPU batch of EGT's PCQM4Mv2 recipe (2,048 over 8 GPUs); a
        # batch of 32 small molecules measures kernel-launch overhead, not the model. 20 timed steps
        # after 5 of warm-up: a compiled row's first step compiles, the next ones settle.
        p = Plan(f"{gpus}× {torch.cuda.get_device_name(0)}", gpus, 50, 20, 25, 1e-2,
                 ("--device", "cuda", "--steps", "20", "--warmup", "5", "--compile", "--cuda-graphs", *cache), batches or (256,), {})
    if compile:
        p.train_overrides = compile_overrides(out / "inductor")
    return p


class Budget:
    """The run's time budget: a step gets its cap and no more than what is left."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def cap(self, seconds: float) -> float | None:
        """Seconds a step may run, or None when too little is left to start one."""
        left = self.left()
        return None if left < MIN_STEP_S else min(seconds, left)


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
    """`pid` and every process below it, parents first (Linux /proc). torchrun starts each rank with
    setsid: a kill of the launcher, or of its process group, leaves the ranks running."""
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

    from gtscale.train.resolve import recorded_path

    return str(yaml.safe_load(recorded_path(run_dir).read_text()).get("backend", "?"))


# --- the steps ----------------------------------------------------------------------------------

class Check:
    """One gpu-check run: its plan, budget and folder, and what its steps recorded."""

    def __init__(self, p: Plan, budget: Budget, out: Path, config: str):
        self.p, self.budget, self.out, self.config = p, budget, out, config
        self.env = _env(p.env)
        self.steps: list[StepRecord] = []
        self.lines: list[str] = []  # the training report, printed as it comes and kept for summary.md

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def record(self, name: str, status: str, began: float) -> bool:
        self.steps.append(StepRecord(name, status, time.monotonic() - began))
        print(f"[gpu-check] {name}: {status}", flush=True)
        return status == "ok"

    def start(self, name: str, seconds: float) -> float | None:
        """The seconds step `name` may run (`seconds`, at most what is left), or None after recording
        it as skipped."""
        cap = self.budget.cap(seconds)
        if cap is None:
            self.record(name, f"skipped: {max(self.budget.left(), 0):.0f} s of the budget left", time.monotonic())
        else:
            print(f"[gpu-check] {name} (at most {cap:.0f} s)", flush=True)
        return cap

    @staticmethod
    def status(code: int, cap: float) -> str:
        return {0: "ok", 124: f"timed out after {cap:.0f} s"}.get(code, f"failed (exit {code})")

    def shard(self) -> Path | None:
        shards = self.out / "shards"
        cap = self.start("shard", SHARE["shard"] * self.budget.seconds)
        if cap is None:
            return None
        began = time.monotonic()
        cmd = [sys.executable, "-m", "gtscale.cli", "shard", "nci-tpsa", "--out", str(shards), "--workers", str(os.cpu_count() or 1),
               "--no-progress"]
        return shards if self.record("shard", self.status(run_logged(cmd, self.out / "shard.log", self.env, cap), cap), began) else None

    def train(self, shards: Path) -> dict[int, float] | None:
        """The uninterrupted run; its losses by step, or None when it failed."""
        p, ref = self.p, self.out / "reference"
        cap = self.start("train", SHARE["train"] * self.budget.seconds)
        if cap is None:
            return None
        began = time.monotonic()
        self.say(f"train {self.config}: {p.steps} steps on {p.processes} process(es), ZeRO-2 bf16{', compiled' if p.train_overrides else ''}")
        code = run_logged(train_command(p, self.config, shards, ref, resume=False), self.out / "reference.log", self.env, cap)
        losses = train_losses(ref)
        if code != 0 or max(losses, default=0) != p.steps:
            self.say(f"      FAILED: exit {code}, {max(losses, default=0)} steps logged; see {self.out / 'reference.log'}")
            self.record("train", self.status(code, cap) if code else f"failed: {max(losses, default=0)} of {p.steps} steps", began)
            return None
        self.say(f"      backend {backend_of(ref)}; loss step 1 {losses[1]:.4f} → step {p.steps} {losses[p.steps]:.4f}{compile_note(ref)}")
        self.record("train", "ok", began)
        return losses

    def resume(self, shards: Path, reference: dict[int, float]) -> None:
        p, cut = self.p, self.out / "resumed"
        cap = self.start("resume", SHARE["resume"] * self.budget.seconds)
        if cap is None:
            return
        began = time.monotonic()
        self.say(f"kill after step {p.kill_after} (checkpoint at {p.checkpoint_every}), resume, compare")
        log = self.out / "resumed.log"
        try:
            killed_at = run_and_kill(train_command(p, self.config, shards, cut, resume=True), log, self.env, cut, p.checkpoint_every,
                                     p.kill_after, cap)
        except RuntimeError as err:
            self.say(f"      FAILED: {err}")
            self.record("resume", f"failed: {err}", began)
            return
        left = max(cap - (time.monotonic() - began), 1)
        code = run_logged(train_command(p, self.config, shards, cut, resume=True), log, self.env, left)
        resumed = train_losses(cut)
        spread, _ = max_relative_difference(resumed, reference, range(1, p.checkpoint_every + 1))
        diff, step = max_relative_difference(resumed, reference, range(p.checkpoint_every + 1, p.steps + 1))
        ok = code == 0 and diff <= p.rtol
        self.say(f"      killed at step {killed_at}; resumed exit {code}; steps {p.checkpoint_every + 1}-{p.steps}: max relative loss "
                 f"difference {diff:.2e} (step {step}; tolerance {p.rtol:.0e}); run-to-run spread of steps 1-{p.checkpoint_every}: "
                 f"{spread:.2e}{compile_note(cut)} — {'ok' if ok else 'FAILED'}")
        if code != 0:
            self.record("resume", self.status(code, left), began)
        else:
            self.record("resume", "ok" if ok else f"failed: losses differ by {diff:.2e} at step {step}", began)

    def bench(self, models: list[str]) -> tuple[list[Path], list[Path]]:
        """Every model at every batch size; the JSON and profile files written."""
        jobs = [(model, batch) for batch in self.p.batches for model in models]
        jsons, profile_files = [], []
        for i, (model, batch) in enumerate(jobs):
            name, tag = f"bench {model} {batch}", f"{Path(model).stem}-{batch}"
            cap = self.start(name, self.budget.left() / (len(jobs) - i))
            if cap is None:
                continue
            began = time.monotonic()
            cmd = [sys.executable, "-m", "gtscale.cli", "bench", "model", "--model", model, "--batch-size", str(batch), "--precision", "bf16",
                   *self.p.bench_args, "--json", str(self.out / f"bench-{tag}.json")]
            if batch == self.p.batches[0]:
                cmd += ["--profile", str(self.out / f"profile-{tag}.md")]
                profile_files.append(self.out / f"profile-{tag}.md")
            code = run_logged(cmd, self.out / f"bench-{tag}.log", self.env, cap)
            self.record(name, self.status(code, cap), began)
            jsons.append(self.out / f"bench-{tag}.json")
        return jsons, profile_files


def claim_empty(out: Path) -> Path:
    """--out must be new or empty: its runs would otherwise resume earlier ones."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: --out must be a new or empty folder")
    return out.resolve()


def gpu_check(p: Plan, out: Path, budget: float, config: str, shards: Path | None, bench_models: list[str]) -> int:
    """Run the plan's steps into `out` (claimed by claim_empty) within `budget` seconds, training
    `config`, on `shards` (None: shard them first), benchmarking `bench_models`; write the report.
    0 when every step passed, else 1."""
    # Stopped from outside (`timeout`, a scheduler): unwind, so that every launch under way is ended
    # with its ranks (run_logged, run_and_kill) instead of left running on the GPUs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out.mkdir(parents=True, exist_ok=True)
    check = Check(p, Budget(budget), out, config)

    shards = shards.resolve() if shards else check.shard()
    reference = None
    if shards:
        reference = check.train(shards)
    else:
        check.record("train", "skipped: no shards", time.monotonic())
    if reference:
        check.resume(shards, reference)
    else:
        check.record("resume", "skipped: no uninterrupted run to compare with", time.monotonic())
    jsons, profile_files = check.bench(bench_models)

    print(write_report(out, p.device, budget, check.steps, check.lines, jsons, profile_files))
    failed = [s.name for s in check.steps if not s.ok]
    print(f"gpu-check: {'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'} in {sum(s.seconds for s in check.steps):.0f} s; "
          f"report {out / 'summary.md'}")
    return 1 if failed else 0
