"""Stop requests for the training process: SIGTERM and SIGUSR1, and DataLoader workers that die.

SIGTERM / SIGUSR1 only set a flag; the trainer reads it at a step boundary, where every rank agrees
to stop together (a collective), checkpoints and exits 75.

`scancel` (and `kill -TERM -PGID`) signal every process of the job step, DataLoader workers
included, and a worker that gets SIGTERM dies. torch's DataLoader then raises in the training
process twice over: from its SIGCHLD handler, asynchronously, wherever the process happens to be
(inside a collective, inside a checkpoint write), and from the next fetch of a batch. The first is
deferred here (`defer_worker_failures`): the failure is recorded and surfaces only at the next fetch,
which DataLoader checks itself (it looks at its workers whenever it waits for one). The trainer
fetches a step's batches ahead of time, so a failed fetch under a stop request is agreed on with the
step and the run still checkpoints at the step it reached (see Trainer.train_step).
"""

from __future__ import annotations

import signal
import time


#: What fetching a batch raises when the DataLoader's workers were killed: RuntimeError once torch
#: has noticed a dead worker; ConnectionError or EOFError when the worker died while the training
#: process was taking over a batch's shared-memory file descriptor from it (multiprocessing's
#: resource sharer), before torch's check sees the worker gone.
LOADER_FAILURES = (RuntimeError, ConnectionError, EOFError)


class StopSignals:
    """SIGTERM / SIGUSR1 → `requested`; torch's SIGCHLD raise → `worker_failure` (a message)."""

    #: How long a fetch that found its workers dead waits for the stop request that killed them:
    #: a signal sent to a process group reaches every member at once, but nothing orders their handlers.
    GRACE_S = 5.0

    def __init__(self):
        self.requested = False
        self.worker_failure: str | None = None
        self._torch_sigchld = None

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, self._on_stop)

    def _on_stop(self, signum, frame) -> None:
        self.requested = True

    def defer_worker_failures(self) -> None:
        """Wrap the SIGCHLD handler torch's DataLoader installs (once per process, when the first
        iterator with workers starts); a no-op when there is none or it is already wrapped."""
        current = signal.getsignal(signal.SIGCHLD)
        if current == self._on_child or not callable(current):
            return
        self._torch_sigchld = current
        signal.signal(signal.SIGCHLD, self._on_child)

    def _on_child(self, signum, frame) -> None:
        try:
            self._torch_sigchld(signum, frame)
        except RuntimeError as err:  # "DataLoader worker (pid N) is killed by signal: …"
            self.worker_failure = str(err)

    def wait(self, seconds: float = GRACE_S) -> bool:
        """True once a stop is requested, waiting up to `seconds` for it."""
        deadline = time.monotonic() + seconds
        while not self.requested and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.requested
