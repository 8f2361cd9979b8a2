"""Read-only session fixtures built once per test run, not once per pytest-xdist worker.

Each worker is a process of its own with its own session: a session-scoped fixture that shards a
dataset for tests in many modules would be built again by every worker. `built_once` puts the
result in a folder of the run's shared temporary root instead: the first worker to ask builds it
under a lock, the others wait for it and reuse it. Tests treat such folders as read-only (copy
before modifying), as they do any session fixture.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every worker of this run sees (the worker's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """ROOT/NAME after `build(ROOT/NAME)` ran to its end once in this test run.

    A build that raised leaves no completion mark: the next caller starts it again from an empty
    folder (and fails the same way, with its own traceback)."""
    folder = shared_root(tmp_path_factory) / name
    done = folder.with_name(f"{name}.built")
    with open(folder.with_name(f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if build raises
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
