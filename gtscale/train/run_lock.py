"""One run per run directory: an exclusive lock on `<run_dir>/run.lock`, held for the run's lifetime.

Two runs writing one run_dir would interleave their metrics.jsonl lines and overwrite each other's
config.yaml and checkpoints. The lock is a POSIX record lock (`fcntl.lockf`), which the kernel
releases when the process ends however it ends (SIGKILL, OOM; NFS supports these locks), so a
crashed run never leaves a stale lock and there is nothing to clean up. It belongs to the process
alone: DataLoader workers forked later do not inherit it (an `flock` they would share, and a run
resumed right after a SIGKILL would be refused until they noticed and exited). The price: a POSIX
lock is per process, so a second acquire in the holding process succeeds and closing any
descriptor of the file drops it; the holding process therefore never opens the file again (the
refusal reads it in the refused process). The file keeps the holder's pid and host.

Opening the lock is also where an unusable run_dir is found: a file in its place, a read-only
mount, no permission. Each is one line naming the path (UserError), before anything is written.

In a multi-rank run one process holds the lock (rank 0; launch/train probes it before starting the
ranks) and every rank learns rank 0's answer (trainer.py), so all refuse together.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
from pathlib import Path

from gtscale.errors import UserError

LOCK_FILE = "run.lock"
#: lockf answers these where the file system cannot lock (some Lustre mounts without -o flock).
_UNSUPPORTED = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL}


class RunLock:
    """An exclusive lock on run_dir; `release()` (or the process ending) gives it up."""

    def __init__(self, run_dir: Path, fd: int | None):
        self.run_dir, self._fd = run_dir, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops this process's lock
            self._fd = None


def acquire(run_dir: str | os.PathLike, option: str = "run_dir", holder_name: str = "another run") -> RunLock:
    """Create run_dir if needed and lock it, or raise UserError: held by another run (its pid and
    host), or run_dir unusable (a file, a read-only mount, no permission). `option` names the folder
    in the message and `holder_name` what holds it (`gtscale fit` locks its --out the same way)."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's pid stays readable
    except OSError as err:
        raise UserError(unusable(run_dir, err, option)) from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise UserError(f"{option} {run_dir}: {holder_name} is using it ({holder(path)}); wait for it to end, or choose another {option}") from None
        if err.errno in _UNSUPPORTED:
            return RunLock(run_dir, None)  # this file system cannot lock: run unguarded, as before locks existed
        raise UserError(unusable(run_dir, err, option)) from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode())
    except OSError as err:  # e.g. a full disk: the lock holds all the same
        if err.errno != errno.ENOSPC:
            os.close(fd)
            raise UserError(unusable(run_dir, err, option)) from None
    return RunLock(run_dir, fd)


def check_free(run_dir: str | os.PathLike) -> None:
    """Raise UserError if run_dir is locked by a run or unusable; hold nothing (launch/train asks
    before starting ranks, whose rank 0 then takes the lock)."""
    acquire(run_dir).release()


def is_lock_file(path: Path) -> bool:
    """Is `path` a lock file acquire wrote (empty, or its holder's pid and host)?"""
    text = path.read_text(errors="replace") if path.stat().st_size < 4096 else "-"
    return text == "" or re.fullmatch(r"pid \d+ on host \S*\n", text) is not None


def holder(path: Path) -> str:
    """What the lock file says of its holder ("pid N on host H")."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "pid not yet recorded"


def unusable(run_dir: Path, err: OSError, option: str = "run_dir") -> str:
    """One line for an OSError of creating or writing in run_dir (the folder `option` names)."""
    target = Path(err.filename) if err.filename else run_dir
    if err.errno == errno.EEXIST or (err.errno == errno.ENOTDIR):
        blocker = next((p for p in [run_dir, *run_dir.parents] if p.exists() and not p.is_dir()), target)
        return f"{option} {run_dir}: {blocker} is a file, not a folder; choose another {option}"
    if err.errno == errno.EROFS:
        return f"{option} {run_dir}: {target} is on a read-only file system; choose a writable {option}"
    if err.errno == errno.EACCES or err.errno == errno.EPERM:
        return f"{option} {run_dir}: no permission to write {target}; choose a writable {option}"
    return f"{option} {run_dir}: cannot write {target}: {err.strerror or err}"


def acquire_on_rank0(run_dir: str | os.PathLike) -> RunLock | None:
    """Rank 0 takes the lock; every rank learns its answer (one all-gather, which every rank reaches
    since acquiring never raises before it) and raises the same UserError. Rank 0 gets the lock,
    the others None."""
    from gtscale.train.checkpoint import gather_to_all

    import torch.distributed as dist

    lock, problem = None, None
    if not dist.is_initialized() or dist.get_rank() == 0:
        try:
            lock = acquire(run_dir)
        except UserError as err:
            problem = str(err)
    problem = gather_to_all(problem)[0]
    if problem is not None:
        raise UserError(problem)
    return lock
