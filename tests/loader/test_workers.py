"""Loader workers start from the fork server by default: a training rank is never forked.

Forking a multi-threaded rank can hang the child in `os.fork()` (loader/workers.py: CPython
gh-112275, seen here as a 2-rank ZeRO-3 evaluation that never ended). Which instant a fork
happens to copy a held lock is chance, so what is checked is the cause: with the default
configuration no worker is forked from the process that iterates the loader."""

import os
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
    assert LoaderConfig().start_method == "forkserver" and PRELOAD == ["gtscale.loader.stream"]
    samples, forked = _forked_workers(nci_shards, tmp_path)
    assert samples > 0 and forked == 0
    # the check sees a fork: `start_method: fork` (kept for single-threaded callers) forks each worker here
    samples_fork, forked = _forked_workers(nci_shards, tmp_path, start_method="fork")
    assert samples_fork == samples and forked == 2
