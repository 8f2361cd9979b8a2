"""slurm/train.sbatch on a real two-node SLURM cluster (cluster.py): preempt, requeue, resume exactly.

Two ranks, one per node (each node has one CPU), train a tiny EGT. Mid-run the job gets SIGUSR1
(`scancel --signal=USR1 --full`: the tasks and the batch shell, as at a time limit with
--signal=USR1@120 or B:USR1@120); both ranks checkpoint at the same step and exit 75, the batch
script requeues the job, and the second start resumes with --resume auto. The losses of every step
must equal those of an uninterrupted run of the same config (two local processes, no SLURM).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster import REPO, only_job, sbatch, tail, train_steps, venv_export, wait_for

sys.path.insert(0, str(REPO / "tests" / "train"))
from launcher import free_port, logs, metrics, run_ranks, write_config  # noqa: E402

TOTAL_STEPS = 60  # ~20 steps/s here: the signal must land before the run ends
SIGNAL_AFTER = 5  # logged steps before the signal
WAIT_S = 240  # from submission to the requeued job's end

# One xdist worker runs every SLURM test: each module's private cluster numbers its jobs from 1,
# and test_slurm_local finds a job's processes by SLURM_JOB_ID.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_usr1_checkpoints_requeues_and_resumes_exactly(cluster, tpsa_shards, tmp_path):
    env, state = dict(cluster["env"]), cluster["state"]
    sections = dict(schedule={"total_steps": TOTAL_STEPS}, checkpoint={"every": 5}, logging={"every": 1})
    config = write_config(tmp_path / "train.yaml", tpsa_shards, tmp_path / "run", **sections)
    run_dir, log_dir = tmp_path / "run", tmp_path / "logs"
    log_dir.mkdir()
    # A free rendezvous port: the script's default (20000 + job id) would collide with another
    # test cluster's job 1 on this host.
    export = f"{venv_export()},OMP_NUM_THREADS=1,GTSCALE_MASTER_PORT={free_port()}"

    def diagnostics() -> str:
        files = [*sorted(log_dir.glob("*.out")), state / "log" / "slurmctld.log", state / "log" / "slurmd-node1.log",
                 state / "log" / "slurmd-node2.log", state / "log" / "jobcomp.txt"]
        return "\n".join(tail(p, 40) for p in files)

    t0 = time.monotonic()
    deadline = t0 + WAIT_S
    job = sbatch(env, "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", f"--export={export}", f"--chdir={log_dir}",
                 f"--output={log_dir}/train-%j.out", str(REPO / "slurm" / "train.sbatch"), str(config))
    out = log_dir / f"train-{job}.out"

    # 1. Training runs on both nodes: wait for some logged steps, then the preemption warning.
    polls = 0
    while len(train_steps(run_dir)) < SIGNAL_AFTER:
        polls += 1
        if polls % 20 == 0:  # about once a second: has the job died?
            assert only_job(env, job)["JobState"] in ("PENDING", "CONFIGURING", "RUNNING"), diagnostics()
        assert time.monotonic() < deadline, f"no {SIGNAL_AFTER} steps logged after {WAIT_S} s\n{diagnostics()}"
        time.sleep(0.05)
    t_signal = time.monotonic()
    signalled = subprocess.run(["scancel", "--signal=USR1", "--full", job], env=env, capture_output=True, text=True, timeout=30)
    assert signalled.returncode == 0, signalled.stderr

    # 2. Both ranks checkpoint and exit 75; the batch script requeues: the job is pending again.
    while True:
        info = only_job(env, job)
        if info["JobState"] == "PENDING" and info["Restarts"] == "1":
            break
        assert info["JobState"] in ("RUNNING", "COMPLETING", "REQUEUED", "PENDING"), f"{info}\n{diagnostics()}"
        assert time.monotonic() < deadline, f"job not requeued: {info}\n{diagnostics()}"
        time.sleep(0.2)
    t_requeued = time.monotonic()
    first_run = train_steps(run_dir)
    stopped = re.search(r"step (\d+): stop requested by signal", out.read_text())
    assert stopped, diagnostics()
    stop_step = int(stopped.group(1))
    assert first_run == list(range(1, stop_step + 1)) and stop_step < TOTAL_STEPS, first_run
    assert (run_dir / "checkpoints" / f"step-{stop_step:08d}" / "COMPLETE").is_file(), diagnostics()
    # SLURM holds a requeued batch job for ~2 minutes (BeginTime); release it sooner to keep the
    # test short, but not within the second of the requeue: slurmd refuses a job credential made
    # no later than the old one's revocation ("Job credential revoked") and the job would fail.
    time.sleep(2)
    released = subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, capture_output=True, text=True, timeout=30)
    assert released.returncode == 0, released.stderr

    # 3. The second start resumes from that checkpoint and finishes the schedule.
    assert wait_for(env, [job], max(1.0, deadline - time.monotonic())), f"job {job} not done after {WAIT_S} s\n{diagnostics()}"
    t_done = time.monotonic()
    info = only_job(env, job)
    text = out.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0" and info["Restarts"] == "1", f"{info}\n{diagnostics()}"
    assert info["NodeList"] == "node[1-2]", info
    assert re.findall(r"\[train\] job \d+ restart=(\d)", text) == ["0", "1"], text
    assert f"requeueing job {job}" in text, text
    # Each start ran rank 0 and rank 1, on different nodes.
    placements = re.findall(r"\[train\] rank (\d)/2 local_rank 0 node=(node\d)", text)
    assert len(placements) == 4, text
    for start in (placements[:2], placements[2:]):
        assert sorted(start) == [("0", "node1"), ("1", "node2")], placements
    assert train_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))  # resumed after stop_step: nothing redone, nothing skipped

    # 4. The same losses as an uninterrupted run, step for step (two local processes, no SLURM).
    reference = write_config(tmp_path / "ref.yaml", tpsa_shards, tmp_path / "ref", **sections)
    assert run_ranks(2, [str(reference)], tmp_path / "ref-logs") == [0, 0], logs(tmp_path / "ref-logs")
    ours, theirs = metrics(run_dir), metrics(tmp_path / "ref")
    steps = range(1, TOTAL_STEPS + 1)
    a, b = np.array([ours[s]["loss"] for s in steps]), np.array([theirs[s]["loss"] for s in steps])
    assert np.allclose(a, b, rtol=1e-6, atol=1e-7), np.c_[steps, a, b]
    assert metrics(run_dir, "valid")[TOTAL_STEPS]["mae"] == pytest.approx(metrics(tmp_path / "ref", "valid")[TOTAL_STEPS]["mae"], rel=1e-6)
    print(f"\nSLURM train: signal {t_signal - t0:.1f} s after submit (stopped at step {stop_step}), requeued "
          f"{t_requeued - t_signal:.1f} s later, resumed run done {t_done - t_requeued:.1f} s later; "
          f"reference run {time.monotonic() - t_done:.1f} s")
