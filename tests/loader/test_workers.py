"""Loader workers start from the fork server by default: a training rank is never forked.

Forking a multi-threaded rank can hang the child in `os.fork()` (loader/workers.py: CPython
gh-112275, seen here as a 2-rank ZeRO-3 evaluation that never ended). Which instant a fork
happens to copy a held lock is chance, so what is checked is the cause: with the default
configuration no worker is forked from the process that iterates the loader."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

from gtscale.loader.config import LoaderConfig
from gtscale.loader.stream import build_loader
from gtscale.loader.workers import PRELOAD

KEYS = ["spd", "y"]
_marker_dir: str | None = None  # set while a test watches this process's forks


def _mark_child() -> None:
    if _marker_dir is not None:
        with open(os.path.join(_marker_dir, str(os.getpid())), "w"):
            pass


os.register_at_fork(after_in_child=_mark_child)


def _forked_workers(shards, tmp_path, **overrides) -> tuple[int, int]:
    """(samples the loader yielded, workers forked from this process) over one evaluation pass."""
    global _marker_dir
    config = replace(LoaderConfig(node_budget=256, num_workers=2, keys=KEYS), **overrides)
    loader = build_loader(shards, "valid", config, train=False, rank=0, world_size=1)
    marks = tmp_path / overrides.get("start_method", "default")
    marks.mkdir()
    _marker_dir = str(marks)
    try:
        samples = sum(int((batch.idx >= 0).sum()) for batch in loader)
    finally:
        _marker_dir = None
    return samples, len(list(marks.iterdir()))


def test_workers_are_not_forked_from_the_loading_process_by_default(nci_shards, tmp_path):
    assert LoaderConfig().start_method == "forkserver" and PRELOAD == ["gtscale.loader.worker_server"]
    samples, forked = _forked_workers(nci_shards, tmp_path)
    assert samples > 0 and forked == 0
    # the check sees a fork: `start_method: fork` (kept for single-threaded callers) forks each worker here
    samples_fork, forked = _forked_workers(nci_shards, tmp_path, start_method="fork")
    assert samples_fork == samples and forked == 2


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def test_a_killed_loading_process_takes_its_fork_server_and_workers_with_it(nci_shards):
    """A worker's parent is the fork server, so torch's orphan check (parent pid changed) only fires
    once the server is gone: the server must die with the process that started it."""
    script = (
        "import sys, time\n"
        "from gtscale.loader.config import LoaderConfig\n"
        "from gtscale.loader.stream import build_loader\n"
        f"loader = build_loader(sys.argv[1], 'train', LoaderConfig(node_budget=256, num_workers=2, keys={KEYS!r}), train=True, rank=0, world_size=1)\n"
        "batches = iter(loader)\n"
        "next(batches)\n"
        "print('loading', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(nci_shards)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "loading"
        helpers = [pid for pid in _session_members(proc.pid) if pid != proc.pid]
        assert len(helpers) >= 3, helpers  # the fork server and two workers (and the resource tracker)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_members(proc.pid) == []
    finally:
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
