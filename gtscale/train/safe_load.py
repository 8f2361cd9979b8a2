"""Loading DeepSpeed checkpoint files without running code from them.

DeepSpeed reads its checkpoints with `torch.load(weights_only=False)` (its TorchCheckpointEngine,
and `zero_to_fp32`, which calls torch.load directly and cannot be given another loader). A file in
a run directory, which people share and pull from clusters, could then run anything. Two layers:

1. `check_file` / `check_folder` open every file of a tag first with torch's own restricted
   unpickler (`weights_only=True`), admitting only tensors, containers, numpy arrays and the few
   DeepSpeed classes its checkpoints hold (found by scanning the pickles of real ZeRO 0-3 fp32 and
   bf16 checkpoints: LossScaler, ZeroStageEnum, fragment_address). A file that needs anything else
   is refused by name before DeepSpeed opens it; a truncated or garbled one is named as corrupt.
2. `weights_only_loads()` wraps DeepSpeed's own loading: torch's documented
   TORCH_FORCE_WEIGHTS_ONLY_LOAD switch turns every `torch.load` in the process into a weights-only
   load even where DeepSpeed passes `weights_only=False`, with the same classes allowed. So a file
   swapped between the check and the load is still refused, not run. (torch documents that override
   of an explicit `weights_only=False` from 2.6 on; on older torch, layer 1 alone stands.)
"""

from __future__ import annotations

import os
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path

import torch

from gtscale.io import load_failure_detail, numpy_safe_globals, refused_global

_FORCE, _FORCE_NO = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def deepspeed_safe_globals() -> list:
    """The non-tensor classes DeepSpeed's checkpoints hold: plain state objects, no code on load."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [*numpy_safe_globals(), LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


@contextmanager
def weights_only_loads():
    """Inside: every torch.load in this process is weights-only, admitting DeepSpeed's classes."""
    saved = {name: os.environ.get(name) for name in (_FORCE, _FORCE_NO)}
    os.environ[_FORCE] = "1"
    os.environ.pop(_FORCE_NO, None)  # torch refuses both at once
    try:
        with torch.serialization.safe_globals(deepspeed_safe_globals()), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's notes about forced weights_only
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_file(path: Path):
    """One checkpoint file, weights-only (tensors memory-mapped when the file is a zip archive)."""
    with weights_only_loads():
        return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))


def describe_failure(path: Path, err: BaseException) -> str:
    """One line naming the file: refused (it names a class that would run code) or unreadable
    (corrupt, truncated, or not a checkpoint at all: random bytes are not a refusal)."""
    what = refused_global(err)
    if what is not None:
        return f"{path}: refused: loading it would run code ({what} is not something a DeepSpeed checkpoint holds)"
    return f"{path}: not a readable checkpoint: corrupt or truncated checkpoint file ({load_failure_detail(err)})"


def check_file(path: Path) -> str | None:
    """None when `path` loads weights-only; else the one-line problem."""
    try:
        load_file(path)
    except Exception as err:  # any failure to read is reported by name, never raised from here
        return describe_failure(path, err)
    return None


def checkpoint_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pt"))


def check_folder(folder: Path, rank: int = 0, world_size: int = 1) -> list[str]:
    """Problems of this rank's share of a tag's files (file i belongs to rank i % world_size).

    A tag without a model-states file is a problem too (reported by rank 0)."""
    files = checkpoint_files(folder)
    problems = [p for i, path in enumerate(files) if i % world_size == rank and (p := check_file(path))]
    if rank == 0 and not any(f.name.endswith("model_states.pt") for f in files):
        problems.insert(0, f"{folder}: no DeepSpeed model-states file")
    return problems
