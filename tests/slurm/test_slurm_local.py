"""launch/slurm-local stop leaves nothing running: a job still running when the cluster stops (a
test that failed mid-job) loses its processes too (slurmstepd, batch script, srun), instead of
holding the host's cores until it reboots."""

import subprocess
import time
from pathlib import Path

import pytest

from cluster import SLURM_LOCAL, sbatch, scontrol_jobs

# One xdist worker runs every SLURM test. Each module's private cluster numbers its jobs from 1, so
# a job's processes are those with its SLURM_JOB_ID under this cluster's SLURM_CONF.
pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.slow]


def _processes_of_job(job: str, conf: str) -> dict[int, str]:
    """pid → command line of every process of `job` of the cluster whose slurm.conf is `conf`."""
    found = {}
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = environ.read_bytes().split(b"\0")
            if f"SLURM_JOB_ID={job}".encode() in variables and f"SLURM_CONF={conf}".encode() in variables:
                found[int(environ.parent.name)] = (environ.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return found


def test_stop_kills_the_processes_of_a_running_job(cluster, tmp_path):
    env = cluster["env"]
    conf = env["SLURM_CONF"]
    job = sbatch(env, "--output", str(tmp_path / "job.out"), "--wrap", "srun sleep 600")
    deadline = time.monotonic() + 60
    while not (scontrol_jobs(env, job)[0]["JobState"] == "RUNNING" and len(_processes_of_job(job, conf)) >= 2):
        assert time.monotonic() < deadline, scontrol_jobs(env, job)
        time.sleep(0.2)
    stopped = subprocess.run([str(SLURM_LOCAL), "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "leftover job process" in stopped.stderr, stopped.stderr
    deadline = time.monotonic() + 10
    while left := _processes_of_job(job, conf):
        assert time.monotonic() < deadline, f"{left}\n{stopped.stderr}"
        time.sleep(0.1)
