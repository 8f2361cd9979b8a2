"""One run per run_dir: the lock refuses a second holder in one line naming the first's pid and host,
dies with its holder (no stale lock), and a refused multi-rank run ends on every rank."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from gtscale.errors import UserError
from gtscale.train import run_lock
from launcher import logs, start_ranks, wait_all, write_config

HOLD = "import sys, time; from gtscale.train import run_lock; run_lock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)"


def hold_in_another_process(run_dir) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_holder_is_refused_naming_the_first(tmp_path):
    run = tmp_path / "run"
    holder = hold_in_another_process(run)
    with pytest.raises(UserError, match=f"another run is using it \\(pid {holder.pid} on host {socket.gethostname()}\\)"):
        run_lock.acquire(run)
    holder.kill()
    holder.wait()
    run_lock.acquire(run).release()


def test_forked_children_do_not_hold_the_lock(tmp_path):
    """DataLoader workers are forked after the lock is taken: once the holder is gone (released,
    or SIGKILLed), its still-living children must not keep the run_dir locked, or a job resumed
    right after a crash is refused."""
    child_code = ("import os, sys, time; from gtscale.train import run_lock; run_lock.acquire(sys.argv[1]); "
                  "pid = os.fork()\nif pid == 0: time.sleep(60); os._exit(0)\nprint(pid, flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", child_code, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    worker = int(holder.stdout.readline())
    try:
        with pytest.raises(UserError, match=f"pid {holder.pid} "):
            run_lock.check_free(tmp_path / "run")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        run_lock.check_free(tmp_path / "run")  # the forked worker still lives
        os.kill(worker, 0)
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = hold_in_another_process(tmp_path / "run")
    with pytest.raises(UserError, match=f"pid {holder.pid} "):
        run_lock.check_free(tmp_path / "run")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    run_lock.check_free(tmp_path / "run")


@pytest.mark.parametrize("make,fragment", [
    (lambda d: d.write_text("mine"), "is a file, not a folder"),
    (lambda d: (d.parent / "parent").write_text("mine"), "parent is a file, not a folder"),
])
def test_unusable_run_dir_is_one_line(tmp_path, make, fragment):
    run = tmp_path / "run"
    make(run)
    target = run if run.exists() else tmp_path / "parent" / "run"
    with pytest.raises(UserError, match=fragment):
        run_lock.acquire(target)


@pytest.mark.slow
def test_a_locked_run_dir_refuses_every_rank(tpsa_shards, tmp_path):
    """Two ranks into a run_dir another run holds: both exit 2 with rank 0's answer (no rank waits
    in a collective for the others), and nothing in the run_dir changes."""
    run = tmp_path / "run"
    holder = hold_in_another_process(run)
    try:
        cfg = write_config(tmp_path / "c.yaml", tpsa_shards, run)
        codes = wait_all(start_ranks(2, [str(cfg)], tmp_path / "log"), timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert codes == [2, 2], logs(tmp_path / "log")
    for rank in range(2):
        lines = [line for line in (tmp_path / "log" / f"rank{rank}.log").read_text().splitlines() if "error" in line]
        assert len(lines) == 1 and f"another run is using it (pid {holder.pid} on host" in lines[0], lines
    assert sorted(p.name for p in run.iterdir()) == [run_lock.LOCK_FILE]


def test_launch_train_refuses_before_starting_ranks(tpsa_shards, tmp_path):
    from test_local_launch import LAUNCH, launch_env

    run = tmp_path / "run"
    holder = hold_in_another_process(run)
    try:
        cfg = write_config(tmp_path / "c.yaml", tpsa_shards, run)
        start = time.time()
        result = subprocess.run([str(LAUNCH), "--nproc_per_node", "2", str(cfg)], env=launch_env(), capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and f"(pid {holder.pid} on host" in lines[0], result.stderr
    assert not (run / "config.yaml").exists() and time.time() - start < 120
