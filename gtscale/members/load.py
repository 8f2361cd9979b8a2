"""The members an ensemble is made of, read from export folders: a fine-tuned model
(inference.LoadedExport), an ECFP + SVR or calibrated SVC (svr.py's export) or a kernel SVR (SVC)
on a backbone's representation (kernel_svr.py's), or several targets' exports side by side
(`gtscale fit --target-columns`'s). Each answers `predict(molecules, batch_size) → (outputs [n, T],
reasons)` for a chunk of SMILES, so that predict, fit and the tables ensemble them alike
(ensemble.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.inference import LoadedExport, Molecules, check_record, graph_representation, load_model_export
from gtscale.members.ensemble import ensemble, ensemble_weights
from gtscale.members.fingerprints import ecfp_rows
from gtscale.members.kernel_svr import KERNEL_EXPORT_NAME, KERNEL_SVC_EXPORT_NAME, KernelSVR, read_kernel_export
from gtscale.members.svr import SVC_EXPORT_NAME, SVR_EXPORT_NAME, TanimotoSVR, read_svr_export
from gtscale.members.landmark import LANDMARK_CLASSIFIER_EXPORT_NAME, LANDMARK_EXPORT_NAME, LandmarkModel, read_landmark_export
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
    """An ECFP + SVR (SVC) export (svr.write_svr_export wrote it)."""

    path: Path
    svr: TanimotoSVR
    task: TaskConfig
    target_names: list[str]
    max_nodes: int = DEFAULT_MAX_ATOMS  # most atoms of a molecule read (its shards record none)

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        counts, reasons = molecules.made(("ecfp-counts", self.max_nodes), lambda: ecfp_rows(molecules.smiles, self.max_nodes, counts=True))
        # the counts a kernel member beside it reads too, computed once; its bits are the counts that are not 0
        return svr_outputs(self.task, reasons, lambda kept: self.svr.predict(counts[kept] > 0)), list(reasons)


@dataclass
class KernelMember:
    """A kernel model export and the backbone whose graph representation its kernel reads: a kernel
    SVR (SVC) of one target (kernel_svr.py), or a landmark kernel model of every target (landmark.py)."""

    path: Path
    model: KernelSVR | LandmarkModel
    backbone: LoadedExport
    task: TaskConfig
    target_names: list[str]

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        counts, z, reasons = kernel_inputs(molecules, self.backbone, batch_size)
        return svr_outputs(self.task, reasons, lambda kept: self.model.predict(counts[kept], z[kept]), len(self.target_names)), reasons


def kernel_inputs(molecules: Molecules, backbone: LoadedExport, batch_size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(ECFP4 counts, the backbone's representation, reason per molecule) of a chunk, each computed
    once for every member that reads it."""
    max_nodes = backbone.options.max_nodes
    counts, unread = molecules.made(("ecfp-counts", max_nodes), lambda: ecfp_rows(molecules.smiles, max_nodes, counts=True))
    z, why = molecules.made(("representation", backbone.path, backbone.options), lambda: graph_representation(backbone, molecules.smiles, batch_size))
    return counts, z, [a or b for a, b in zip(unread, why)]


@dataclass
class TargetsMember:
    """Exports that together predict several targets (targets.json: `gtscale fit --target-columns`'
    DIR/export and per-target members): output column t is the weighted mean of target t's column
    of each part, by the part's share of t (ensemble.py's mean; one member to predict, so the spread
    is not reported). A part is an export folder beside targets.json that predicts one target (an
    SVR of that target) or several (a fine-tuned head of them all); each runs once per chunk."""

    path: Path
    parts: list[tuple[list[Member], list[float]]]  # each part's members and their weights (load_members)
    shares: np.ndarray  # float64 [parts, T]: part p's share of target t, each column summing to 1
    columns: np.ndarray  # int [parts, T]: the column of target t in part p's outputs (where its share is > 0)
    task: TaskConfig  # every part's kind (load_targets checks they agree)
    target_names: list[str]

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        reasons = [""] * len(molecules.smiles)
        values = {}
        for p, (members, weights) in enumerate(self.parts):
            if not self.shares[p].any():
                continue
            outputs_p = []
            for member in members:
                value, why = member.predict(molecules, batch_size)
                outputs_p.append(value)
                reasons = [mine or theirs for mine, theirs in zip(reasons, why)]
            values[p] = ensemble(np.stack(outputs_p), weights)[0]
        out = np.empty((len(molecules.smiles), len(self.target_names)), np.float32)
        for t in range(len(self.target_names)):
            used = np.flatnonzero(self.shares[:, t] > 0)
            out[:, t] = ensemble(np.stack([values[p][:, [self.columns[p, t]]] for p in used]), self.shares[used, t])[0][:, 0]
        return out, reasons


def svr_outputs(task: TaskConfig, reasons: list[str], predict, targets: int = 1) -> np.ndarray:
    """float32 [n, targets] outputs of a kernel model for the molecules without a reason
    (`predict(kept)`: [kept] for one target, else [kept, targets]), NaN elsewhere."""
    kept = np.array([not why for why in reasons], bool)
    out = np.full((len(reasons), targets), np.nan, np.float32)
    if kept.any():
        out[kept] = outputs(predict(kept), task.loss).reshape(-1, targets)
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
    name = model_cfg.get("name")
    if name in (SVR_EXPORT_NAME, SVC_EXPORT_NAME, KERNEL_EXPORT_NAME, KERNEL_SVC_EXPORT_NAME):
        classifier = name in (SVC_EXPORT_NAME, KERNEL_SVC_EXPORT_NAME)
        if classifier != (task.loss == "bce"):  # the loss decides whether predict reads its scores as logits
            raise UserError(f"{folder / 'export.json'}: task.loss {task.loss!r} does not fit model.yaml's {name!r} "
                            f"(an SVC's is bce, an SVR's a regression loss)")
    if name in (SVR_EXPORT_NAME, SVC_EXPORT_NAME):
        return FingerprintMember(folder, read_svr_export(model_cfg, export.state, str(folder / MODEL_FILE)), task, names or ["y0"])
    if name in (KERNEL_EXPORT_NAME, KERNEL_SVC_EXPORT_NAME):
        svr, backbone_state = read_kernel_export(model_cfg, export.state, str(folder / MODEL_FILE))
        check_record(meta.get("backbone", {}), folder)
        backbone = load_model_export(folder, model_cfg["backbone"], backbone_state, meta["backbone"])
        return KernelMember(folder, svr, backbone, task, names or ["y0"])
    if name in (LANDMARK_EXPORT_NAME, LANDMARK_CLASSIFIER_EXPORT_NAME):
        if (name == LANDMARK_CLASSIFIER_EXPORT_NAME) != (task.loss == "bce"):
            raise UserError(f"{folder / 'export.json'}: task.loss {task.loss!r} does not fit model.yaml's {name!r} "
                            "(a landmark classifier's is bce, a landmark ridge's a regression loss)")
        model, backbone_state = read_landmark_export(model_cfg, export.state, str(folder / MODEL_FILE))
        check_record(meta.get("backbone", {}), folder)
        backbone = load_model_export(folder, model_cfg["backbone"], backbone_state, meta["backbone"])
        return KernelMember(folder, model, backbone, task, names or [f"y{t}" for t in range(model.coef.shape[1])])
    return load_model_export(folder, model_cfg, export.state, meta)


def load_members(path: Path, within: tuple[Path, ...] = ()) -> tuple[list[Member], list[float]]:
    """(members, weights) of an export folder: an ensemble export's members (ensemble.json, with the
    member folders beside it: `gtscale fit`'s DIR/export), the one member an export of several
    targets is (targets.json: load_targets; `within`: the targets exports it lies in), or the one
    member any other export is."""
    from gtscale.models.export import ENSEMBLE_FILE, ENSEMBLE_FORMAT, TARGETS_FILE

    path = Path(path)
    if (path / TARGETS_FILE).is_file():
        return [load_targets(path, within)], [1.0]
    record_file = path / ENSEMBLE_FILE
    if not record_file.is_file():
        return [load_member(path)], [1.0]
    record = read_record(record_file, ENSEMBLE_FORMAT, ("members", "weights"), "members: folder names beside it, weights: one per member")
    names, weights = record["members"], record["weights"]
    members = [load_member(path / name) for name in names]
    return members, list(ensemble_weights(weights, len(members), option=str(record_file), member="member"))


def load_targets(path: Path, within: tuple[Path, ...] = ()) -> TargetsMember:
    """The export of several targets in `path` (targets.json: the target names; the part folders
    beside it, and each part's share of each target). A part predicts each target it has a share
    of, by name, and every part is of one kind (values or probabilities)."""
    from gtscale.models.export import TARGETS_FILE, TARGETS_FORMAT

    record_file = path / TARGETS_FILE
    if path.resolve() in within:  # a part linked back to a folder above it would be read forever
        raise UserError(f"{record_file}: a part of it leads back to {path}")
    record = read_record(record_file, TARGETS_FORMAT, ("members", "shares"),
                         "targets: distinct names, members: folder names beside it, shares: per member one share of each target")
    names, folders = record.get("targets"), record["members"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise UserError(f"{record_file}: targets must be distinct names, got {names!r}")
    if not all(isinstance(row, list) and len(row) == len(names) and all(is_number(v) for v in row) for row in record["shares"]):
        raise UserError(f"{record_file}: shares: give each member one share per target ({len(names)})")
    shares = np.stack([ensemble_weights([row[t] for row in record["shares"]], len(folders), option=f"{record_file}: shares of {name!r}",
                                        member="member") for t, name in enumerate(names)], axis=1)
    parts = [load_members(path / folder, (*within, path.resolve())) for folder in folders]
    columns = np.zeros(shares.shape, np.int64)
    for p, (members, _) in enumerate(parts):
        check_same_task(members)  # a part's members are averaged column by column
        for t in np.flatnonzero(shares[p] > 0):
            if names[t] not in members[0].target_names:
                raise UserError(f"{record_file}: member {folders[p]} has a share of {names[t]!r} but predicts {', '.join(members[0].target_names)}")
            columns[p, t] = members[0].target_names.index(names[t])
    everyone = [member for members, _ in parts for member in members]
    kinds = {describe_kind(member) for member in everyone}
    if len(kinds) > 1:
        raise UserError(f"{record_file}: its members predict {' and '.join(sorted(kinds))}; one export predicts one kind")
    return TargetsMember(path, parts, shares, columns, everyone[0].task, list(names))


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_record(record_file: Path, expected_format: str, lists: tuple[str, str], layout: str) -> dict:
    """An ensemble.json or targets.json: `expected_format`, two lists of one length (> 0), the first
    of folder names beside the file; a UserError naming the file otherwise (its `layout`)."""
    try:
        record = json.loads(record_file.read_text())
        first, second = record[lists[0]], record[lists[1]]
        ok = record.get("format") == expected_format and isinstance(first, list) and isinstance(second, list) and len(first) == len(second) > 0
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok or not all(isinstance(n, str) and n and "/" not in n and "\\" not in n and n not in (".", "..") for n in first):
        raise UserError(f"{record_file}: not a record gtscale wrote (format {expected_format!r}, {layout})")
    return record


def with_max_nodes(member: Member, max_nodes: int) -> Member:
    """The member reading molecules of at most `max_nodes` atoms (--max-nodes)."""
    if isinstance(member, KernelMember):
        return replace(member, backbone=with_max_nodes(member.backbone, max_nodes))
    if isinstance(member, TargetsMember):
        return replace(member, parts=[([with_max_nodes(m, max_nodes) for m in members], weights) for members, weights in member.parts])
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
    return f"{len(member.target_names)} {describe_kind(member)} target(s)"


def describe_kind(member: Member) -> str:
    return "binary" if member.task.loss == "bce" else "regression"
