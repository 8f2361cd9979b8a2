"""File helpers every part of gtscale shares: atomic writes, checksums, safe torch loading."""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from pathlib import Path

import numpy as np


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a small text file via a temporary name + rename: readers never see half of it."""
    path = Path(path)
    # A name of its own per writer: parts of a split run write the same plan.json at once.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
