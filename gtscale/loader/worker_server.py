"""What a rank's fork server runs when it starts (loader/workers.py names this module in PRELOAD).

Python's fork server has one hook, the modules it imports before forking; this module is that
hook, so importing it does things, and only inside a fork server:

- **It dies with its rank.** A worker forked by the server has the server as its parent, and torch
  ends an orphaned worker by watching its parent's pid: with a server that outlived a killed
  rank (SIGKILL, the OOM killer), every worker would wait for work forever, and keep the server
  alive in turn. PR_SET_PDEATHSIG makes the kernel kill the server with the rank, which hands the
  workers to init, and they exit within seconds as forked ones do.
- **It ignores SIGUSR1**, SLURM's warning before a time limit, which may reach every process of a
  job step: the rank checkpoints at the end of its step and needs its workers until then (the
  workers ignore it too: slots.ignore_stop_signals). SIGTERM still ends it with the rest.
- **It imports the loader** (gtscale.loader.stream: torch, webdataset, numpy), once, so that
  workers start without importing anything.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _in_fork_server() -> bool:
    """The server runs `python -c "from multiprocessing.forkserver import main; main(…)"`."""
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules


if _in_fork_server():
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the rank died before the line above
            os._exit(1)

import gtscale.loader.stream  # noqa: E402,F401  (the preload itself)
