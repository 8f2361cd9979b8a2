"""torchrun --standalone on one machine, with the preemption exit status passed on (`launch/train
[--nproc_per_node N] CONFIG [dotted.key=value ...] [--resume auto|never|TAG]`, cli/launch_train.py).

Every rank that stops for preemption checkpoints and exits 75 (trainer.EXIT_PREEMPTED, "requeue
me"), but torchrun reports any failed rank as its own exit status 1, so a requeueing system outside
SLURM (a Kubernetes job, a cron loop, a workflow engine) cannot tell a preemption stop from a
crash. This wrapper runs torchrun's own launcher in-process and reads each failed rank's exit
status from torchrun's ChildFailedError:

- every failed rank exited 75 (or was ended by torchrun's signal after another did), and a
  checkpoint completed since the launch: exit 75;
- otherwise torchrun's report and exit 1 (a crash), or 2 when every rank refused its input.

Signals: SIGTERM and SIGUSR1 sent to the wrapper are passed to the rank processes only (not their
DataLoader workers), which checkpoint at the same step and exit 75. torchrun's agent would instead
signal each rank's whole process group on SIGTERM and kill it after 30 s, and die of SIGUSR1.
The configuration is checked here first: a bad one is one line and exit 2, no process started.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from gtscale.errors import EXIT_USER_ERROR
from gtscale.train import checkpoint, run_lock
from gtscale.train.preflight import load_train_config

EXIT_PREEMPTED = 75  # trainer.EXIT_PREEMPTED (not imported: that would load DeepSpeed in the launcher)
FORWARDED = (signal.SIGTERM, signal.SIGUSR1)
#: Signals torchrun's agent keeps: it passes them to the ranks' process groups and stops.
AGENT_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"


def local_accelerators() -> int:
    """Training processes by default: one per GPU, else 1."""
    import torch

    return max(1, torch.cuda.device_count())


def exit_status(exitcodes: list[int], checkpointed: bool) -> int:
    """The wrapper's exit status from the failed ranks' exit statuses (negative: killed by a signal)."""
    if not exitcodes:
        return 0
    if EXIT_PREEMPTED in exitcodes and all(code == EXIT_PREEMPTED or code < 0 for code in exitcodes):
        return EXIT_PREEMPTED if checkpointed else 1
    if exitcodes and all(code == EXIT_USER_ERROR for code in exitcodes):
        return EXIT_USER_ERROR
    return 1


def completed_since(ckpt_dir: Path, start: float) -> str | None:
    """The newest checkpoint tag whose COMPLETE marker was written after `start`, if any."""
    tags = [t for t in checkpoint.complete_tags(ckpt_dir) if (ckpt_dir / t / checkpoint.COMPLETE).stat().st_mtime >= start]
    return tags[-1] if tags else None


def _rank_pids() -> list[int]:
    """This process's children: the ranks torchrun started (each with setsid, out of reach of our process group)."""
    me = str(os.getpid())
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # after "(comm)": state, ppid, …
            pids.append(int(stat.parent.name))
    return pids


def _forward(signum, frame) -> None:
    for pid in _rank_pids():
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def run_torchrun(nproc: int, train_args: list[str]) -> list[int]:
    """torchrun --standalone --nproc_per_node nproc -m gtscale.cli train …; the failed ranks' exit
    statuses ([] when every rank exited 0). SIGINT, SIGHUP, SIGQUIT stay torchrun's: it passes them
    to the ranks' process groups and raises SignalException, answered here by 128 + the signal."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # The agent registers its own handlers for AGENT_SIGNALS; SIGTERM stays ours (forwarded to the
    # ranks). It is named as torchrun's option, not only as TORCHELASTIC_SIGNALS_TO_HANDLE: torchrun
    # sets that variable from --signals-to-handle (whose default includes SIGTERM) before it starts
    # the ranks, and its handler would then stop them without a checkpoint and exit 143.
    for signum in FORWARDED:
        signal.signal(signum, _forward)
    try:
        run(parse_args(["--standalone", f"--nproc_per_node={nproc}", f"--signals-to-handle={AGENT_SIGNALS}", "-m", "gtscale.cli", "train", *train_args]))
    except ChildFailedError as err:
        codes = [failure.exitcode for failure in err.failures.values()]
        if not all(code in (EXIT_PREEMPTED, EXIT_USER_ERROR) or code < 0 for code in codes):
            print(err.format_msg(), file=sys.stderr)  # torchrun's own report of a crash
        return codes
    except SignalException as err:
        print(f"launch/train: interrupted by {signal.Signals(err.sigval).name}; the ranks were stopped without a checkpoint", file=sys.stderr)
        raise SystemExit(128 + int(err.sigval)) from None
    return []


def launch(nproc: int, config: str, overrides: list[str], resume: str) -> int:
    """Train `config` with `overrides` in `nproc` processes under torchrun; the exit status (module
    docstring). A refused configuration, or a run_dir another run holds, is a UserError before any
    process starts."""
    cfg = load_train_config(config, overrides)
    run_lock.check_free(cfg.run_dir)  # refused here, before any rank starts, when another run holds it
    start = time.time()
    codes = run_torchrun(nproc, [config, *overrides, "--resume", resume])
    tag = completed_since(Path(cfg.run_dir) / "checkpoints", start)
    status = exit_status(codes, tag is not None)
    if status == EXIT_PREEMPTED:
        print(f"launch/train: ranks exited {EXIT_PREEMPTED} after checkpoint {tag}: exiting {EXIT_PREEMPTED}; requeue with --resume auto", file=sys.stderr)
    elif EXIT_PREEMPTED in codes:
        print(f"launch/train: ranks exited {EXIT_PREEMPTED} but no checkpoint completed since the launch: exiting {status}", file=sys.stderr)
    return status
