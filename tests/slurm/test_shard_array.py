"""slurm/shard-array.sbatch + shard-merge.sbatch on a real two-node SLURM cluster (launch/slurm-local).

The cluster is two slurmd processes (node1, node2, one CPU each) and a slurmctld on this host,
authenticated by its own munged. Each test run gets its own state folder and ports, so it
neither joins nor stops a cluster someone else started with launch/slurm-local.
"""

from __future__ import annotations

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
SHARD_SIZE = "500"
WAIT_S = 240

pytestmark = pytest.mark.slow


def _cannot_run() -> str | None:
    """Why this host cannot run a local SLURM cluster; None when it can (it must, as root on Linux)."""
    if platform.system() != "Linux":
        return "launch/slurm-local needs Linux"
    if os.geteuid() != 0:
        return "launch/slurm-local runs slurmctld/slurmd/munged as root; not root here"
    if not (shutil.which("slurmctld") and shutil.which("munged")) and not shutil.which("apt-get"):
        return "no slurm-wlm/munge installed and no apt-get to install them"
    return None


def _free_port_base() -> int:
    """A port p with p, p+1, p+2 free (slurmctld, node1's slurmd, node2's slurmd)."""
    for _ in range(50):
        base = random.randrange(20000, 30000)
        try:
            for p in range(base, base + 3):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no three consecutive free ports")


def _tail(path: Path, n: int = 30) -> str:
    try:
        return f"--- {path} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"--- {path}: {err}"


@pytest.fixture(scope="module")
def cluster(request):
    """Start launch/slurm-local in a private folder; yield the environment for sbatch & co; stop it."""
    why = _cannot_run()
    if why:
        pytest.skip(why)
    state = Path(f"/tmp/gtscale-slurm-test-{os.getpid()}")  # short: munge's socket path must fit in 108 bytes
    env = os.environ | {
        "GTSCALE_SLURM_DIR": str(state),
        "GTSCALE_SLURM_PORT": str(_free_port_base()),
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


def _sbatch(env: dict, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"sbatch {' '.join(args)}: {done.stderr}"
    return done.stdout.strip().split(";")[0]


def _scontrol_jobs(env: dict, job_id: str) -> list[dict[str, str]]:
    """`scontrol -o show job` as one dict per job (array tasks are separate jobs)."""
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in done.stdout.splitlines() if line.strip()]


def _wait_for(env: dict, job_ids: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"], env=env, capture_output=True, text=True, timeout=30)
        if queued.returncode == 0 and not queued.stdout.strip():
            return True
        time.sleep(1)
    return False


def _records(manifest: dict) -> int:
    return sum(split["samples"] for split in manifest["splits"].values())


def _tars(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.tar"))}


def test_array_job_shards_across_two_nodes_and_merges_byte_identical(cluster, tmp_path):
    env = dict(cluster["env"])
    # The jobs must run this interpreter's venv: name it (and keep PATH) in the exported environment.
    venv = sys.prefix if sys.prefix != sys.base_prefix else None
    export = "ALL" + (f",GTSCALE_VENV={venv}" if venv else "")
    out, logs, ref = tmp_path / "out", tmp_path / "logs", tmp_path / "ref"
    logs.mkdir()

    t0 = time.monotonic()
    array_id = _sbatch(env, "--array=0-1", "--cpus-per-task=1", f"--export={export}", f"--chdir={logs}",
                       f"--output={logs}/shard-%A_%a.out", str(REPO / "slurm" / "shard-array.sbatch"),
                       "nci-tpsa", "-", str(out), "--shard-size", SHARD_SIZE)
    merge_id = _sbatch(env, f"--dependency=afterok:{array_id}", "--kill-on-invalid-dep=yes", f"--export={export}",
                       f"--chdir={logs}", f"--output={logs}/merge-%j.out", str(REPO / "slurm" / "shard-merge.sbatch"), str(out))
    finished = _wait_for(env, [array_id, merge_id], WAIT_S)
    elapsed = time.monotonic() - t0
    state = cluster["state"]
    diagnostics = "\n".join(_tail(p) for p in [*sorted(logs.glob("*.out")), state / "log" / "slurmctld.log", state / "log" / "jobcomp.txt"])
    assert finished, f"jobs {array_id}, {merge_id} still queued after {WAIT_S} s\n{diagnostics}"

    # Both array tasks ran, succeeded, and (one CPU per node) ran one on each node.
    tasks = _scontrol_jobs(env, array_id)
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1"], diagnostics
    assert all(t["JobState"] == "COMPLETED" and t["ExitCode"] == "0:0" for t in tasks), f"{tasks}\n{diagnostics}"
    assert {t["NodeList"] for t in tasks} == {"node1", "node2"}, diagnostics
    merge = _scontrol_jobs(env, merge_id)[0]
    assert merge["JobState"] == "COMPLETED" and merge["ExitCode"] == "0:0", f"{merge}\n{diagnostics}"
    # The task logs agree (the sbatch script prints its node), and each ran the right part.
    for task in ("0", "1"):
        text = (logs / f"shard-{array_id}_{task}.out").read_text()
        assert re.search(rf"part {task}/2 node=node[12] ", text), text
        assert f"part {task}/2 done" in text, text

    # Same records and the very same bytes as one process sharding the whole dataset.
    single = subprocess.run([sys.executable, "-m", "gtscale.cli", "shard", "nci-tpsa", "--out", str(ref),
                             "--shard-size", SHARD_SIZE, "--no-progress"], capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    manifest, reference = (json.loads((d / "manifest.json").read_text()) for d in (out, ref))
    assert _records(manifest) == _records(reference) > 0
    ours, theirs = _tars(out), _tars(ref)
    assert sorted(ours) == sorted(theirs) and len(ours) == 10
    assert ours == theirs
    for name in ("manifest.json", "rejects.tsv"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    print(f"\nSLURM array (2 tasks) + merge: {elapsed:.1f} s from submit to done")
