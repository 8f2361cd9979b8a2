"""Crafted and corrupted DeepSpeed checkpoint files, made from real ones, for the safety tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch


class RunsCode:
    """Unpickling this runs `touch marker`: what an attacker would put in a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant_code(path: Path, marker: Path) -> Path:
    """Add an entry to a real checkpoint file whose unpickling would create `marker`."""
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own real file
    state["extra"] = RunsCode(marker)
    torch.save(state, path)
    return path


def truncate(path: Path) -> Path:
    """Cut a checkpoint file in half, as an interrupted copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def copy_run(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest


def model_states(folder: Path) -> Path:
    return sorted(folder.glob("*model_states.pt"))[0]


def optim_states(folder: Path) -> Path:
    return sorted(folder.glob("*optim_states.pt"))[-1]
