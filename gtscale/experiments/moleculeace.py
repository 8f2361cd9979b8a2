"""The molecules behind a MoleculeACE shard directory, and the benchmark's activity-cliff RMSE.

The manifest names the dataset (`moleculeace-<set>-seed<k>`, the seed that carved validation from
the train split) and its source CSV with its sha256; reading that CSV again through the sharder's
own reader gives the same SMILES, splits and cliff flags, row number = record idx."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.prep.sources.base import MoleculeTable
from gtscale.prep.sources.moleculeace import cliff_flag, read_moleculeace

NAME = re.compile(r"moleculeace-(CHEMBL\w+?)-seed(\d+)")


def is_moleculeace(shards: Path | str) -> bool:
    return NAME.fullmatch(str(load_manifest(shards)["dataset"])) is not None


def source_table(shards: Path | str) -> MoleculeTable:
    """The MoleculeTable the shards were written from; a UserError if they are not a MoleculeACE
    set with --targets given, or if the source CSV changed since."""
    manifest = load_manifest(shards)
    match = NAME.fullmatch(str(manifest["dataset"]))
    if match is None:
        raise UserError(f"{shards}: dataset {manifest['dataset']!r} is not a MoleculeACE set (shard one with `gtscale shard moleculeace --dataset CHEMBL214_Ki`)")
    source = manifest["sources"][0]
    path = Path(source["path"])
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != source["sha256"]:
        raise UserError(f"{shards}: source {path} is missing or changed since sharding (sha256 differs from the manifest)")
    return read_moleculeace(match.group(1), path.parent, seed=int(match.group(2)))


def cliff_mask(table: MoleculeTable, idx: np.ndarray) -> np.ndarray:
    """Whether each record idx (a CSV row) is an activity-cliff molecule."""
    flags = np.array([cliff_flag(name) for name in table.names])
    return flags[idx]


def cliff_rmse(table: MoleculeTable, idx: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """RMSE over the activity-cliff molecules among `idx` (MoleculeACE's second metric)."""
    return rmse_where(cliff_mask(table, idx), y_pred, y_true)


def rmse_where(mask: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """RMSE of the first target over the labelled rows `mask` selects (the cliff molecules); NaN if none."""
    from sklearn.metrics import root_mean_squared_error

    mask = mask & ~np.isnan(y_true[:, 0])
    return float(root_mean_squared_error(y_true[mask, 0], y_pred[mask, 0])) if mask.any() else float("nan")
