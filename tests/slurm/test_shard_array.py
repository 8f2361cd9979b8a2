"""slurm/shard-array.sbatch + shard-merge.sbatch on a real two-node SLURM cluster (launch/slurm-local).

The cluster (cluster.py) is two slurmd processes (node1, node2, one CPU each) and a slurmctld on
this host, private to this module: its own state folder, ports and munged.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import REPO, sbatch, scontrol_jobs, tail, venv_export, wait_for

SHARD_SIZE = "500"
WAIT_S = 240

# One xdist worker runs every SLURM test: each module's private cluster numbers its jobs from 1,
# and test_slurm_local finds a job's processes by SLURM_JOB_ID.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _records(manifest: dict) -> int:
    return sum(split["samples"] for split in manifest["splits"].values())


def _tars(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.tar"))}


def test_array_job_shards_across_two_nodes_and_merges_byte_identical(cluster, tmp_path):
    env = dict(cluster["env"])
    # The jobs must run this interpreter's venv: name it (and keep PATH) in the exported environment.
    export = venv_export()
    out, logs, ref = tmp_path / "out", tmp_path / "logs", tmp_path / "ref"
    logs.mkdir()

    t0 = time.monotonic()
    array_id = sbatch(env, "--array=0-1", "--cpus-per-task=1", f"--export={export}", f"--chdir={logs}",
                      f"--output={logs}/shard-%A_%a.out", str(REPO / "slurm" / "shard-array.sbatch"),
                      "nci-tpsa", "-", str(out), "--shard-size", SHARD_SIZE)
    merge_id = sbatch(env, f"--dependency=afterok:{array_id}", "--kill-on-invalid-dep=yes", f"--export={export}",
                      f"--chdir={logs}", f"--output={logs}/merge-%j.out", str(REPO / "slurm" / "shard-merge.sbatch"), str(out))
    finished = wait_for(env, [array_id, merge_id], WAIT_S)
    elapsed = time.monotonic() - t0
    state = cluster["state"]
    diagnostics = "\n".join(tail(p) for p in [*sorted(logs.glob("*.out")), state / "log" / "slurmctld.log", state / "log" / "jobcomp.txt"])
    assert finished, f"jobs {array_id}, {merge_id} still queued after {WAIT_S} s\n{diagnostics}"

    # Both array tasks ran, succeeded, and (one CPU per node) ran one on each node.
    tasks = scontrol_jobs(env, array_id)
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1"], diagnostics
    assert all(t["JobState"] == "COMPLETED" and t["ExitCode"] == "0:0" for t in tasks), f"{tasks}\n{diagnostics}"
    assert {t["NodeList"] for t in tasks} == {"node1", "node2"}, diagnostics
    merge = scontrol_jobs(env, merge_id)[0]
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
