"""The folders `gtscale fit` writes for `gtscale predict` (members/load.py's load_members reads them):

    DIR/members/<member>/   each member's own export: one export folder, or an ensemble export of
                            its parts (ensemble.json and a folder per part: the fine-tuned seeds)
    DIR/export/             the chosen model: an ensemble export of the chosen members' folders,
                            equal shares per member

With several target columns every folder predicts every target. An SVR (SVC) member is one model
per target: targets.json names the targets and the folders beside it (target-0, target-1, …), each
that target's export, with a share of 1 of its own target. The fine-tuned member is one multi-output
head per seed, an ensemble export as above. DIR/export is then a targets.json over the folders of
the members chosen for any target, each target's chosen members sharing it equally.

A rerun replaces what an earlier fit wrote in these folders, and removes what it no longer
chooses (files and export folders gtscale wrote: the folders were claimed before any work).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gtscale.io import atomic_write_text

MEAN = "mean"  # the candidate that averages every member


@dataclass
class FittedMember:
    """One member of the recipe for one target, fitted: the export folders it writes (folder name →
    writer) and their weights within it, its predictions for the selection rows, what was chosen for it."""

    name: str
    writers: dict[str, Callable[[Path], Path]]
    weights: list[float]
    selection: np.ndarray  # predictions (a classifier's: probabilities) for the selection rows
    chosen: dict
    all_targets: bool = False  # its exports predict every target column (the fine-tuned head), not this target's alone


def write_member(folder: Path, fitted: list[FittedMember], targets: list[str]) -> None:
    """A member's own export of every target (`fitted`: the member as fitted for each target)."""
    if len(targets) == 1 or fitted[0].all_targets:
        write_parts(folder, fitted[0])
        return
    folders = [f"target-{t}" for t in range(len(targets))]
    for name, member in zip(folders, fitted):
        write_parts(folder / name, member)
    write_targets_record(folder, targets, folders, np.eye(len(targets)).tolist())


def write_parts(folder: Path, member: FittedMember) -> None:
    """A member's export of one target (or of all, all_targets): the folder itself for one part, an
    ensemble export of its parts otherwise."""
    from gtscale.models.export import FILES

    if len(member.writers) == 1:
        next(iter(member.writers.values()))(folder)
        tidy(folder, set(FILES))
        return
    for name, write in member.writers.items():
        write(folder / name)
    write_ensemble_record(folder, list(member.writers), member.weights)


def write_choice(folder: Path, fitted: dict[str, list[FittedMember]], chosen: list[list[str]], targets: list[str]) -> None:
    """DIR/export: of one target, the chosen members' export folders side by side, equal shares per
    member (an ensemble export); of several, each member chosen for any target as in DIR/members,
    and targets.json giving target t's chosen members (`chosen[t]`) equal shares of it."""
    if len(targets) > 1:
        used = [name for name in fitted if any(name in names for names in chosen)]
        for name in used:
            write_member(folder / name, fitted[name], targets)
        shares = [[1.0 / len(names) if name in names else 0.0 for names in chosen] for name in used]
        write_targets_record(folder, targets, used, shares)
        return
    names, weights = [], []
    for member in (fitted[name][0] for name in chosen[0]):
        total = sum(member.weights)
        for (name, write), weight in zip(member.writers.items(), member.weights):
            write(folder / name)
            names.append(name)
            weights.append(weight / total / len(chosen[0]))
    write_ensemble_record(folder, names, weights)


def write_ensemble_record(folder: Path, names: list[str], weights: list[float]) -> None:
    """ensemble.json: the member folders beside it and their weights (members/load.py's load_members)."""
    from gtscale.models.export import ENSEMBLE_FILE, ENSEMBLE_FORMAT

    folder.mkdir(parents=True, exist_ok=True)
    tidy(folder, {ENSEMBLE_FILE, *names})
    atomic_write_text(folder / ENSEMBLE_FILE, json.dumps({"format": ENSEMBLE_FORMAT, "members": names, "weights": weights}, indent=1))


def write_targets_record(folder: Path, targets: list[str], members: list[str], shares: list[list[float]]) -> None:
    """targets.json: the target names, the member folders beside it and each one's share of each target (members/load.py's load_targets)."""
    from gtscale.models.export import TARGETS_FILE, TARGETS_FORMAT

    tidy(folder, {TARGETS_FILE, *members})
    record = {"format": TARGETS_FORMAT, "targets": targets, "members": members, "shares": shares}
    atomic_write_text(folder / TARGETS_FILE, json.dumps(record, indent=1))


def tidy(folder: Path, keep: set[str]) -> None:
    """Remove from `folder` what an earlier fit wrote there and this one does not (`keep`): an
    export's files, an ensemble's or targets' record, export folders. Left behind, an old
    targets.json would be read before a new ensemble.json."""
    from gtscale.models.export import ENSEMBLE_FILE, EXPORT_MARKERS, FILES, TARGETS_FILE

    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and any((entry / marker).is_file() for marker in EXPORT_MARKERS):
            shutil.rmtree(entry)
        elif entry.is_file() and entry.name in (*FILES, ENSEMBLE_FILE, TARGETS_FILE):
            entry.unlink()


def copy_export(source: Path, folder: Path) -> Path:
    """A copy of the export folder `source` (gtscale wrote both)."""
    from gtscale.models.export import FILES

    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, folder / f".{name}.tmp")
        (folder / f".{name}.tmp").replace(folder / name)
    return folder
