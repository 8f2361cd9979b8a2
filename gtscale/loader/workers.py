"""How DataLoader workers start: by default from a fork server, never forked from a training rank.

A training rank is multi-threaded (gloo's or NCCL's threads, DeepSpeed's, tqdm's monitor), and
`fork` copies whatever locks those threads hold at that instant into a child that has none of
them. CPython up to 3.11.7 takes the interpreter's thread-state lock in the child before resetting
it (gh-112275, fixed in 3.11.8 and 3.12), and a native thread holds that lock whenever it enters
Python (a gloo thread completing a collective does): a worker forked at that instant hangs in
`os.fork()`, its rank waits for a batch that never comes and the other ranks wait for it in the
next collective. This was seen here (tests/train/test_new_models_zero.py, 2 ranks under ZeRO-3,
about one run in twenty under load: the evaluation loader's worker stuck in
`PyOS_AfterFork_Child`). Python 3.14 makes the fork server its default for the same reason.

A fork server is a fresh, single-threaded process started once per rank (fork + exec, no Python
runs between them); it imports the loader's modules once (PRELOAD) and forks every worker from
itself, so a worker still starts in milliseconds and no worker inherits a rank's threads. It dies
with its rank, taking the workers with it (worker_server.py).
`start_method: fork` (LoaderConfig) keeps the old behaviour for single-threaded callers.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

#: What the fork server imports before it forks a worker: worker_server ties the server's life to
#: its rank's and imports the loader (torch, webdataset, numpy), so workers import nothing.
PRELOAD = ["gtscale.loader.worker_server"]

_server_started = False


def start_fork_server() -> None:
    """Start this process's fork server now, once: its imports then overlap the caller's own
    start-up (a trainer calls this before building its engine) instead of delaying the first batch."""
    global _server_started
    if _server_started:
        return
    from multiprocessing import forkserver

    multiprocessing.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()  # returns once the server is launched; its imports run there
    _server_started = True


def worker_context(start_method: str | None) -> BaseContext | None:
    """The multiprocessing context for a DataLoader's workers (None: Python's default)."""
    if start_method is None:
        return None
    if start_method == "forkserver":
        start_fork_server()
    return multiprocessing.get_context(start_method)


def end_workers(items) -> None:
    """End a DataLoader iterator's workers now (a no-op for one without workers, or already ended).

    Left to the iterator's `__del__` after a loader error (the error's traceback holds the
    iterator until it is dropped), torch's shutdown was seen to wait out its 5 s join for each
    worker, whose stop message never arrived, and then kill it: 10 s for two workers. Ended here,
    where the epoch ends, the workers take their stop message and exit at once. torch has no public
    close for an iterator; `_shutdown_workers` is what its own `__del__` and end of data call."""
    shutdown = getattr(items, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
