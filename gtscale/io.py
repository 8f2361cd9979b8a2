"""File helpers every part of gtscale shares: atomic writes, checksums, safe torch loading, and
the rule of which output folders gtscale may write into."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from gtscale.errors import UserError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a small text file via a temporary name + rename: readers never see half of it."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a file via a temporary name + rename: readers never see half of it."""
    path = Path(path)
    # A name of its own per writer: parts of a split run write the same plan.json at once.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        note_disk_full(err, tmp, len(data))
        tmp.unlink(missing_ok=True)  # a full disk, say: leave no half-written temporary behind
        raise


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def numpy_safe_globals() -> list:
    """The numpy pieces that torch.save of plain numpy arrays references; nothing that runs code.

    (OGB-LSC's split_dict.pt holds numpy index arrays; our checkpoints hold numpy RNG states.)
    numpy moved `_reconstruct` from numpy.core to numpy._core, so both names are allowed."""
    reconstruct = np._core.multiarray._reconstruct
    dtype_classes = [type(np.dtype(t)) for t in (np.int64, np.int32, np.uint32, np.uint64, np.int16, np.uint8, np.float64, np.float32)]
    return [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype, *dtype_classes]


def safe_torch_load(path: str | os.PathLike):
    """torch.load with weights_only=True: tensors, containers and numpy arrays only, never code."""
    import torch

    with torch.serialization.safe_globals(numpy_safe_globals()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about pickle protocols; failures raise anyway
        return torch.load(path, map_location="cpu", weights_only=True)


_TORCH_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation of torch.load")


def load_failure_detail(err: BaseException) -> str:
    """A torch.load failure in a few words for a one-line message: torch's messages run to
    paragraphs of advice around one line that says what failed (an empty EOFError says nothing)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not line.strip().startswith(_TORCH_BOILERPLATE)]
    return f"{type(err).__name__}: {lines[0].split('. ')[0]}" if lines else type(err).__name__


def describe_load_failure(path: str | os.PathLike, err: BaseException) -> str:
    """Why torch.load failed on `path`, in a few words: a zip-format file (torch's own since 1.6)
    that lacks the end record of its archive was cut short, by an interrupted copy or download,
    whatever torch reports for it (an OSError "[Errno 22] Invalid argument" when it seeks past the
    end); any other failure as load_failure_detail words it."""
    import zipfile

    try:
        with open(path, "rb") as f:
            zip_start = f.read(4) == b"PK\x03\x04"
    except OSError:
        zip_start = False
    if zip_start and not zipfile.is_zipfile(path):
        size = Path(path).stat().st_size
        return f"cut short: a zip archive of {size:,} bytes that lacks its end record, as an interrupted copy or download leaves one"
    return load_failure_detail(err)


def refused_global(err: BaseException) -> str | None:
    """The global (module.name) that torch's weights-only unpickler refused to load, if that is why
    `err` was raised; None for any other failure (garbage bytes, truncation), which is not a
    refusal: nothing in such a file asked to run code."""
    import pickle
    import re

    if not isinstance(err, pickle.UnpicklingError):
        return None
    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    return found.group(1) if found else None


#: marker file name → test of its parsed JSON object: does it say gtscale wrote the folder?
Markers = Mapping[str, Callable[[dict], bool]]


def read_json_object(path: Path) -> dict | None:
    """A file's JSON object; None if it holds anything else (a user's notes, a list, bad bytes)."""
    try:
        content = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return content if isinstance(content, dict) else None


def read_first_line(path: Path, limit: int = 1 << 20) -> str | None:
    """A text file's first line (at most `limit` characters, without its line end); None if unreadable."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.readline(limit).rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        return None


def _read_marker(path: Path, is_ours: Callable, read_mark: Callable[[Path], object | None] = read_json_object) -> bool:
    mark = read_mark(path)
    return mark is not None and bool(is_ours(mark))


def _has_marker(folder: Path, markers: Markers) -> bool:
    return any(_read_marker(folder / name, test) for name, test in markers.items() if (folder / name).is_file())


def _is_marker_temporary(name: str, markers: Markers) -> bool:
    """atomic_write_text's temporary of a marker (<marker>.<pid>.<thread>.tmp): what a concurrent
    part of the same run leaves for an instant while it writes plan.json."""
    return name.endswith(".tmp") and any(name.startswith(f"{marker}.") for marker in markers)


def claim_out_dir(out: str | os.PathLike, markers: Markers, inputs: Iterable[str | os.PathLike | None] = (), option: str = "--out",
                  nested: bool = False, own: Mapping[str, Callable[[Path], bool]] = {}) -> Path:
    """Check, before anything is written, that gtscale may write (and replace files) in folder `out`.

    The one rule of every command that writes a folder: `out` may be new, empty, or a folder that
    gtscale itself wrote, recognised by one of `markers` (a graph store's graph.json, a shard
    folder's plan.json or manifest.json with gtscale's fingerprint, an export's export.json).
    Anything else in it might be a user's, and what a rerun replaces or removes would be lost: so
    it is refused, as is an `out` equal to or inside one of `inputs` (the command's own input).
    With `nested`, a folder holding only such folders is gtscale's too (`gtscale evaluate` writes
    RUN/export/<tag>/ exports, and `gtscale export` then writes RUN/export itself).
    `own` names files that are gtscale's but mark nothing, each with the test of its content (a
    lock file that the command takes before it writes its marker): they alone do not make `out` a user's.
    Returns `out` as a Path; raises UserError naming the folder otherwise."""
    out = Path(out)
    refuse_inputs(out, inputs, option, "write to a folder outside it")
    if not out.exists():
        return out
    if not out.is_dir():
        raise UserError(f"{out}: {option} needs a folder here, but this is a file")
    if _has_marker(out, markers):
        return out
    entries = [p for p in out.iterdir() if not _is_marker_temporary(p.name, markers) and not (nested and p.is_dir() and _has_marker(p, markers))
               and not (p.name in own and p.is_file() and own[p.name](p))]
    if not entries:
        return out
    names = " or ".join(markers)
    found = ", ".join(sorted(p.name for p in entries)[:3]) + (", …" if len(entries) > 3 else "")
    raise UserError(f"{out}: {option} holds files gtscale did not write ({found}; no gtscale {names}); "
                    "choose a new or empty folder")


def refuse_inputs(out: Path, inputs: Iterable[str | os.PathLike | None], option: str, advice: str) -> None:
    """Refuse an `out` that is one of the command's `inputs` (also through a link) or inside one."""
    for source in inputs:
        if source is None:
            continue
        source = Path(source).resolve()
        same = out.resolve() == source or (out.exists() and source.exists() and os.path.samefile(out, source))
        if same or source in out.resolve().parents:
            raise UserError(f"{out}: {option} is {'the input' if same else 'inside the input'} {source}; {advice}")


def claim_out_file(path: str | os.PathLike, is_ours: Callable, option: str, read_mark: Callable[[Path], object | None] = read_json_object,
                   inputs: Iterable[str | os.PathLike | None] = (), overwrite_flag: str | None = None, overwrite: bool = False) -> Path:
    """The same rule for a command that writes one file: replace only a file gtscale wrote.

    A file is gtscale's when `is_ours` accepts its mark, as `read_mark` reads it: a JSON file's
    object (the default), a Markdown report's first line, a CSV's header. A command may offer
    `overwrite_flag` to replace a file all the same (`overwrite`: it was given); never one of its
    own `inputs`, nor a file inside one."""
    path = Path(path)
    refuse_inputs(path, inputs, option, "choose another file name")
    if path.is_dir():
        raise UserError(f"{path}: {option} needs a file here, but this is a folder")
    if path.exists() and not overwrite and not _read_marker(path, is_ours, read_mark):
        also = f" (or pass {overwrite_flag} to replace it)" if overwrite_flag else ""
        raise UserError(f"{path}: {option} would replace a file gtscale did not write; choose a new file name{also}")
    return path


def check_can_write(path: str | os.PathLike, option: str) -> None:
    """Before the work: that a file can be created where `path` is to be written, probed in its
    nearest existing folder (and removed at once; no folder is made). A read-only mount, no
    permission, a file where a folder should be: one line naming `option` and the path."""
    path = Path(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        why = {errno.EROFS: "is on a read-only file system", errno.EACCES: "is not writable (no permission)", errno.EPERM: "is not writable (no permission)",
               errno.ENOTDIR: "is a file, not a folder"}.get(err.errno, f"cannot be written ({err.strerror or err})")
        raise UserError(f"{path}: {option}: {folder} {why}; choose a writable place") from None


#: errno values of a full disk or an exhausted quota.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def note_disk_full(err: BaseException, path: str | os.PathLike, needed: int) -> None:
    """On a full disk, record on `err` how many bytes the failed write of `path` needed (at least)
    and how many were free at that moment: the writer calls this before it removes what it left
    half-written, which frees space again and would make a later measure say there was room.
    disk_full_is_user_error reports both. The first writer to note an error wins."""
    if isinstance(err, OSError) and err.errno in DISK_FULL and not hasattr(err, "gtscale_space"):
        err.gtscale_space = (needed, free_bytes(path))


@contextmanager
def disk_full_is_user_error(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk (or quota) while writing `path` into one line naming it, what the write
    needed and what was free when it failed (as the writer noted it: note_disk_full; measured
    here for a writer that did not).

    The writer inside must already remove what it left half-written (ShardWriter, atomic_write_text)."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        noted = getattr(err, "gtscale_space", None)
        space = f"the write needed at least {readable_size(noted[0])}, {readable_size(noted[1])} was free when it failed" if noted \
            else f"{readable_size(free_bytes(path))} free there"
        raise UserError(f"{path}: no space left on the device ({space}); free some space or choose another folder") from None


def free_bytes(path: str | os.PathLike) -> int:
    """The free bytes of the file system holding `path` (or its nearest existing parent)."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def readable_size(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return ""
