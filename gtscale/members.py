"""The members an ensemble is made of, read from export folders: a fine-tuned model
(inference.LoadedExport), an ECFP + SVR (`gtscale baseline ecfp`'s export) or a kernel SVR on a
backbone's representation (`gtscale baseline kernel`'s). Each answers `predict(molecules, batch_size)
→ (outputs [n, T], reasons)` for a chunk of SMILES, so that predict, fit and the tables ensemble
them alike (experiments/ensemble.py). A top-level module like inference.py, which it extends, and
predict.py, which it serves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.experiments.ensemble import ensemble_weights
from gtscale.experiments.ecfp import SVR_EXPORT_NAME, TanimotoSVR, ecfp_rows, read_svr_export
from gtscale.experiments.kernel_svr import KERNEL_EXPORT_NAME, KernelSVR, read_kernel_export
from gtscale.inference import LoadedExport, Molecules, check_record, graph_representation, load_model_export
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
from gtscale.train.config import TaskConfig
from gtscale.train.outputs import outputs


class Member(Protocol):
    """One model of an ensemble, as predict reads it."""

    path: Path
    task: TaskConfig
    target_names: list[str]

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        """(outputs float32 [n, T] — a regression's values, a binary task's probabilities — NaN where
        a molecule was not read; reason per molecule, "" if none)."""


@dataclass
class FingerprintMember:
    """An ECFP + SVR export (experiments/ecfp.py wrote it)."""

    path: Path
    svr: TanimotoSVR
    task: TaskConfig
    target_names: list[str]
    max_nodes: int = DEFAULT_MAX_ATOMS  # most atoms of a molecule read (its shards record none)

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        bits, reasons = molecules.made(("ecfp", self.max_nodes), lambda: ecfp_rows(molecules.smiles, self.max_nodes))
        return svr_outputs(self.task, reasons, lambda kept: self.svr.predict(bits[kept])), list(reasons)


@dataclass
class KernelMember:
    """A kernel SVR export (experiments/kernel_svr.py): the SVR and the backbone whose graph
    representation it reads."""

    path: Path
    svr: KernelSVR
    backbone: LoadedExport
    task: TaskConfig
    target_names: list[str]

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        max_nodes = self.backbone.options.max_nodes
        bits, unread = molecules.made(("ecfp", max_nodes), lambda: ecfp_rows(molecules.smiles, max_nodes))
        z, why = molecules.made(("representation", self.backbone.path, self.backbone.options),
                                lambda: graph_representation(self.backbone, molecules.smiles, batch_size))
        reasons = [a or b for a, b in zip(unread, why)]
        return svr_outputs(self.task, reasons, lambda kept: self.svr.predict(bits[kept], z[kept])), reasons


def svr_outputs(task: TaskConfig, reasons: list[str], predict) -> np.ndarray:
    """float32 [n, 1] outputs of an SVR for the molecules without a reason (`predict(kept)`), NaN elsewhere."""
    kept = np.array([not why for why in reasons], bool)
    out = np.full((len(reasons), 1), np.nan, np.float32)
    if kept.any():
        out[kept, 0] = outputs(predict(kept), task.loss)
    return out


def load_member(path: Path) -> Member:
    """Read an export folder (or its model.pt): weights-only, checked against its model config.
    The one place exports are read as ensemble members."""
    from gtscale.models.export import MODEL_FILE, read_export

    export = read_export(path)
    meta, model_cfg, folder = export.meta, export.config, export.folder
    check_record(meta, folder)
    names = list(meta["shards"].get("task", {}).get("target_names", []))
    task = from_dict(TaskConfig, meta["task"], prefix=f"{folder / 'export.json'}: task.")
    if model_cfg.get("name") == SVR_EXPORT_NAME:
        return FingerprintMember(folder, read_svr_export(model_cfg, export.state, str(folder / MODEL_FILE)), task, names or ["y0"])
    if model_cfg.get("name") == KERNEL_EXPORT_NAME:
        svr, backbone_state = read_kernel_export(model_cfg, export.state, str(folder / MODEL_FILE))
        check_record(meta.get("backbone", {}), folder)
        backbone = load_model_export(folder, model_cfg["backbone"], backbone_state, meta["backbone"])
        return KernelMember(folder, svr, backbone, task, names or ["y0"])
    return load_model_export(folder, model_cfg, export.state, meta)


def load_members(path: Path) -> tuple[list[Member], list[float]]:
    """(members, weights) of an export folder: an ensemble export's members (ensemble.json, with the
    member folders beside it: `gtscale fit`'s DIR/export), or the one member any other export is."""
    from gtscale.models.export import ENSEMBLE_FILE, ENSEMBLE_FORMAT

    path = Path(path)
    record_file = path / ENSEMBLE_FILE
    if not record_file.is_file():
        return [load_member(path)], [1.0]
    try:
        record = json.loads(record_file.read_text())
        names, weights = record["members"], record["weights"]
        ok = record.get("format") == ENSEMBLE_FORMAT and isinstance(names, list) and isinstance(weights, list) and len(names) == len(weights) > 0
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok or not all(isinstance(n, str) and n and "/" not in n and "\\" not in n and n not in (".", "..") for n in names):
        raise UserError(f"{record_file}: not an ensemble record gtscale wrote (format {ENSEMBLE_FORMAT!r}, members: folder names beside it, "
                        "weights: one per member)")
    members = [load_member(path / name) for name in names]
    return members, list(ensemble_weights(weights, len(members), option=str(record_file), member="member"))


def with_max_nodes(member: Member, max_nodes: int) -> Member:
    """The member reading molecules of at most `max_nodes` atoms (--max-nodes)."""
    if isinstance(member, KernelMember):
        return replace(member, backbone=with_max_nodes(member.backbone, max_nodes))
    if isinstance(member, FingerprintMember):
        return replace(member, max_nodes=max_nodes)
    return replace(member, options=replace(member.options, max_nodes=max_nodes))


def check_same_task(members: list[Member]) -> None:
    """Members of one ensemble predict the same task: as many targets, of the same kind (values or
    probabilities). Their names may differ (`y` in one CSV, `expt` in another): the first member's name the outputs."""
    first = members[0]
    for member in members[1:]:
        if describe_task(member) != describe_task(first):
            raise UserError(f"{member.path}: predicts {describe_task(member)}, {first.path} predicts {describe_task(first)}: "
                            "an ensemble's members predict the same task")


def describe_task(member: Member) -> str:
    return f"{len(member.target_names)} {'binary' if member.task.loss == 'bce' else 'regression'} target(s)"
