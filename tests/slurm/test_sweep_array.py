"""slurm/sweep.sbatch with GTSCALE_REFIT=1 on a real SLURM cluster (cluster.py): each array task
trains its seed's validated run, then its refit on train+valid for the step chosen on validation;
a task preempted during the validated run is requeued, resumes it, and only then refits; `gtscale
sweep --collect --refit` then reads both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from cluster import REPO, only_job, sbatch, tail, train_steps, venv_export, wait_for

sys.path.insert(0, str(REPO / "tests" / "train"))
from launcher import free_port, write_config  # noqa: E402

TOTAL_STEPS = 40
SIGNAL_AFTER = 5  # logged steps of the validated run before the signal
WAIT_S = 300

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_preempted_task_resumes_its_validated_run_then_refits(cluster, tpsa_shards, tmp_path):
    env, state = dict(cluster["env"]), cluster["state"]
    sections = dict(schedule={"total_steps": TOTAL_STEPS}, checkpoint={"every": 5}, eval={"every": 5})
    config = write_config(tmp_path / "train.yaml", tpsa_shards, tmp_path / "sweep", **sections)
    sweep, logs = tmp_path / "sweep", tmp_path / "logs"
    validated, refit = sweep / "seed-1", sweep / "seed-1-refit"
    logs.mkdir()
    export = f"{venv_export()},OMP_NUM_THREADS=1,GTSCALE_MASTER_PORT={free_port()},GTSCALE_SEEDS=1,GTSCALE_REFIT=1"

    def diagnostics() -> str:
        files = [*sorted(logs.glob("*.out")), state / "log" / "slurmctld.log", state / "log" / "jobcomp.txt"]
        return "\n".join(tail(p, 40) for p in files)

    def task() -> dict[str, str]:
        return only_job(env, job)

    deadline = time.monotonic() + WAIT_S
    job = sbatch(env, "--array=0", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", f"--export={export}",
                 f"--chdir={logs}", f"--output={logs}/sweep-%A_%a.out", str(REPO / "slurm" / "sweep.sbatch"), str(config))

    # 1. Preempt the validated run: it checkpoints, the task is requeued, no refit has started.
    while len(train_steps(validated)) < SIGNAL_AFTER:
        assert task()["JobState"] in ("PENDING", "CONFIGURING", "RUNNING"), diagnostics()
        assert time.monotonic() < deadline, f"no {SIGNAL_AFTER} steps logged after {WAIT_S} s\n{diagnostics()}"
        time.sleep(0.1)
    signalled = subprocess.run(["scancel", "--signal=USR1", "--full", job], env=env, capture_output=True, text=True, timeout=30)
    assert signalled.returncode == 0, signalled.stderr
    while not (task()["JobState"] == "PENDING" and task()["Restarts"] == "1"):
        assert time.monotonic() < deadline, f"task not requeued\n{diagnostics()}"
        time.sleep(0.2)
    stopped_at = train_steps(validated)[-1]
    assert stopped_at < TOTAL_STEPS and not refit.exists(), diagnostics()
    time.sleep(2)  # as in test_train_multinode: release the requeued task sooner than SLURM's ~2 minutes
    released = subprocess.run(["scontrol", "update", f"JobId={task()['JobId']}", "StartTime=now"], env=env,
                              capture_output=True, text=True, timeout=30)
    assert released.returncode == 0, released.stderr

    # 2. The second start finishes the validated run, then trains the refit for its best step.
    assert wait_for(env, [job], max(1.0, deadline - time.monotonic())), f"task {job} not done after {WAIT_S} s\n{diagnostics()}"
    info = task()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{diagnostics()}"
    assert train_steps(validated) == list(range(1, TOTAL_STEPS + 1)), diagnostics()
    best = json.loads((validated / "best.json").read_text())["step"]
    assert train_steps(refit) == list(range(1, best + 1)), diagnostics()
    resolved = yaml.safe_load((refit / "config.resolved.yaml").read_text())
    assert resolved["data"]["train_split"] == "train+valid" and resolved["max_steps"] == best and resolved["seed"] == 1
    assert resolved["schedule"]["total_steps"] == TOTAL_STEPS  # the validated run's learning-rate curve

    # 3. The sweep collects the refit as the seed's model.
    collected = subprocess.run([sys.executable, "-m", "gtscale.cli", "sweep", str(config), "--seeds", "1", "--collect", "--refit"],
                               capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stderr
    (row,) = json.loads((sweep / "sweep.json").read_text())["rows"]
    (run,) = row["runs"]
    assert row["refit"] and run["run_dir"] == str(refit) and run["refit_step"] == best and run["validated"]["run_dir"] == str(validated)
