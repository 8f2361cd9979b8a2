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

A rerun replaces what an earlier fit wrote in these folders; what it no longer writes is removed
by fit/written.py, which removes only files an earlier fit wrote (planned_files lists what a fit
may write here, before the work; the writers return what they did write).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gtscale.errors import UserError
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


def write_member(folder: Path, fitted: list[FittedMember], targets: list[str]) -> list[Path]:
    """A member's own export of every target (`fitted`: the member as fitted for each target); the files written."""
    if len(targets) == 1 or fitted[0].all_targets:
        return write_parts(folder, fitted[0])
    folders = [f"target-{t}" for t in range(len(targets))]
    files = [f for name, member in zip(folders, fitted) for f in write_parts(folder / name, member)]
    return files + [write_targets_record(folder, targets, folders, np.eye(len(targets)).tolist())]


def write_parts(folder: Path, member: FittedMember) -> list[Path]:
    """A member's export of one target (or of all, all_targets): the folder itself for one part, an
    ensemble export of its parts otherwise; the files written."""
    if len(member.writers) == 1:
        return export_files(next(iter(member.writers.values()))(folder))
    files = [f for name, write in member.writers.items() for f in export_files(write(folder / name))]
    return files + [write_ensemble_record(folder, list(member.writers), member.weights)]


def write_choice(folder: Path, fitted: dict[str, list[FittedMember]], chosen: list[list[str]], targets: list[str]) -> list[Path]:
    """DIR/export: of one target, the chosen members' export folders side by side, equal shares per
    member (an ensemble export); of several, each member chosen for any target as in DIR/members,
    and targets.json giving target t's chosen members (`chosen[t]`) equal shares of it. Returns the files written."""
    if len(targets) > 1:
        used = [name for name in fitted if any(name in names for names in chosen)]
        files = [f for name in used for f in write_member(folder / name, fitted[name], targets)]
        shares = [[1.0 / len(names) if name in names else 0.0 for names in chosen] for name in used]
        return files + [write_targets_record(folder, targets, used, shares)]
    names, weights, files = [], [], []
    for member in (fitted[name][0] for name in chosen[0]):
        total = sum(member.weights)
        for (name, write), weight in zip(member.writers.items(), member.weights):
            files += export_files(write(folder / name))
            names.append(name)
            weights.append(weight / total / len(chosen[0]))
    return files + [write_ensemble_record(folder, names, weights)]


def export_files(folder: Path) -> list[Path]:
    """The files of the export folder a writer has just written."""
    from gtscale.models.export import FILES

    return [folder / name for name in FILES]


def write_ensemble_record(folder: Path, names: list[str], weights: list[float]) -> Path:
    """ensemble.json: the member folders beside it and their weights (members/load.py's load_members)."""
    from gtscale.models.export import ENSEMBLE_FILE, ENSEMBLE_FORMAT

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / ENSEMBLE_FILE, json.dumps({"format": ENSEMBLE_FORMAT, "members": names, "weights": weights}, indent=1))
    return folder / ENSEMBLE_FILE


def write_targets_record(folder: Path, targets: list[str], members: list[str], shares: list[list[float]]) -> Path:
    """targets.json: the target names, the member folders beside it and each one's share of each target (members/load.py's load_targets)."""
    from gtscale.models.export import TARGETS_FILE, TARGETS_FORMAT

    folder.mkdir(parents=True, exist_ok=True)
    record = {"format": TARGETS_FORMAT, "targets": targets, "members": members, "shares": shares}
    atomic_write_text(folder / TARGETS_FILE, json.dumps(record, indent=1))
    return folder / TARGETS_FILE


def planned_files(members: dict[str, tuple[list[str], bool]], targets: int) -> set[str]:
    """Every file (relative to DIR) that writing these members (name → (its export folders: the
    member's own name for an SVR, a folder per seed for the fine-tuned one; whether each predicts
    every target, FittedMember.all_targets)) may write in DIR/members and DIR/export, whichever
    the choice."""
    from gtscale.models.export import ENSEMBLE_FILE, FILES, TARGETS_FILE

    def member_files(folder: str, parts: list[str], all_targets: bool) -> set[str]:
        if len(parts) > 1:  # an ensemble export of its parts (of every target at once)
            return {f"{folder}/{ENSEMBLE_FILE}", *(f"{folder}/{part}/{name}" for part in parts for name in FILES)}
        if targets == 1 or all_targets:
            return {f"{folder}/{name}" for name in FILES}
        return {f"{folder}/{TARGETS_FILE}", *(f"{folder}/target-{t}/{name}" for t in range(targets) for name in FILES)}

    files = {"export/" + (TARGETS_FILE if targets > 1 else ENSEMBLE_FILE)}
    for member, (parts, all_targets) in members.items():
        files |= member_files(f"members/{member}", parts, all_targets)
        if targets > 1:
            files |= member_files(f"export/{member}", parts, all_targets)
        else:
            files |= {f"export/{part}/{name}" for part in parts for name in FILES}
    return files


def claim_export_folders(out: Path, planned: set[str]) -> None:
    """Before the work: each export folder fit may write (a folder of `planned`'s export files) that
    exists is one gtscale wrote or holds nothing, as every export writer requires (a user's files
    left alone in it are refused now, not after the work)."""
    from gtscale.models.export import FILES, claim_export_dir

    folders = {(out / path).parent for path in planned if Path(path).name in FILES}
    for folder in sorted(folders):
        if not folder.is_dir():
            continue
        try:
            claim_export_dir(folder)
        except UserError:
            found = ", ".join(sorted(p.name for p in folder.iterdir())[:3])
            raise UserError(f"{folder}: fit writes an export here, but it holds files gtscale did not write ({found}) and no export; "
                            "move them away or choose another --out") from None


def copy_export(source: Path, folder: Path) -> Path:
    """A copy of the export folder `source` (gtscale wrote both)."""
    from gtscale.models.export import FILES

    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, folder / f".{name}.tmp")
        (folder / f".{name}.tmp").replace(folder / name)
    return folder
