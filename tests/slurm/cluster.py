"""A private two-node SLURM cluster for the tests in this folder (launch/slurm-local), and small helpers.

The cluster is two slurmd processes (node1, node2, one CPU each) and a slurmctld on this host,
authenticated by its own munged. Each test module gets its own state folder and ports, so it
neither joins nor stops a cluster someone else started with launch/slurm-local. Use it with
`from cluster import cluster` in a test module (a module-scoped fixture).
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM_LOCAL = REPO / "launch" / "slurm-local"
_clusters = itertools.count()


def cannot_run() -> str | None:
    """Why this host cannot run a local SLURM cluster; None when it can (it must, as root on Linux)."""
    if platform.system() != "Linux":
        return "launch/slurm-local needs Linux"
    if os.geteuid() != 0:
        return "launch/slurm-local runs slurmctld/slurmd/munged as root; not root here"
    if not (shutil.which("slurmctld") and shutil.which("munged")) and not shutil.which("apt-get"):
        return "no slurm-wlm/munge installed and no apt-get to install them"
    return None


def free_port_base(count: int = 3) -> int:
    """A port p with p .. p+count-1 free (slurmctld, node1's slurmd, node2's slurmd)."""
    for _ in range(50):
        base = random.randrange(20000, 30000)
        try:
            for p in range(base, base + count):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("", p))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports")


def tail(path: Path, n: int = 30) -> str:
    try:
        return f"--- {path} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"--- {path}: {err}"


@pytest.fixture(scope="module")
def cluster(request):
    """Start launch/slurm-local in a private folder; yield the environment for sbatch & co; stop it."""
    why = cannot_run()
    if why:
        pytest.skip(why)
    # Short: munge's socket path must fit in 108 bytes. One per module of this pytest process.
    state = Path(f"/tmp/gtscale-slurm-test-{os.getpid()}-{next(_clusters)}")
    env = os.environ | {
        "GTSCALE_SLURM_DIR": str(state),
        "GTSCALE_SLURM_PORT": str(free_port_base()),
        "SLURM_CONF": str(state / "slurm.conf"),
    }
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]  # e.g. when the suite itself runs inside a SLURM job
    failed_before = request.session.testsfailed
    try:
        started = subprocess.run([str(SLURM_LOCAL), "start"], env=env, capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, f"launch/slurm-local start failed:\n{started.stdout}\n{started.stderr}"
        yield {"env": env, "state": state}
    finally:
        stopped = subprocess.run([str(SLURM_LOCAL), "stop"], env=env, capture_output=True, text=True, timeout=120)
        if request.session.testsfailed == failed_before and stopped.returncode == 0:
            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"\nlocal SLURM cluster logs kept in {state}", file=sys.stderr)


def venv_export() -> str:
    """sbatch --export value: the whole environment, plus this interpreter's venv for the jobs to activate."""
    venv = sys.prefix if sys.prefix != sys.base_prefix else None
    return "ALL" + (f",GTSCALE_VENV={venv}" if venv else "")


def sbatch(env: dict, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"sbatch {' '.join(args)}: {done.stderr}"
    return done.stdout.strip().split(";")[0]


def scontrol_jobs(env: dict, job_id: str) -> list[dict[str, str]]:
    """`scontrol -o show job` as one dict per job (array tasks are separate jobs)."""
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in done.stdout.splitlines() if line.strip()]


def wait_for(env: dict, job_ids: list[str], timeout: float) -> bool:
    """Wait until none of the jobs is in the queue any more; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"], env=env, capture_output=True, text=True, timeout=30)
        if queued.returncode == 0 and not queued.stdout.strip():
            return True
        time.sleep(1)
    return False


def only_job(env: dict, job_id: str) -> dict[str, str]:
    """`scontrol show job` of a job (or a one-task array) that must be one record."""
    jobs = scontrol_jobs(env, job_id)
    assert len(jobs) == 1, jobs
    return jobs[0]


def train_steps(run_dir: Path) -> list[int]:
    """Every train row's step in RUN_DIR/metrics.jsonl, in file order (a resume that redid steps
    would repeat some)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [row["step"] for row in rows if row["split"] == "train"]
