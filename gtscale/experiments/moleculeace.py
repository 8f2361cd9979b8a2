"""MoleculeACE shard folders and the benchmark's activity-cliff RMSE.

The manifest names the dataset (`moleculeace-<set>-seed<k>`, the seed that carved validation from
the train split); each record's name carries its cliff flag (`<set>:<row>:cliff_mol=<0|1>`), so
the cliff RMSE of any predictions is computed from the shards alone, matched by record idx."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.format.record_meta import split_meta
from gtscale.prep.sources.moleculeace import cliff_flag

NAME = re.compile(r"moleculeace-(CHEMBL\w+?)-seed(\d+)")


def is_moleculeace(shards: Path | str) -> bool:
    return NAME.fullmatch(str(load_manifest(shards)["dataset"])) is not None


def cliff_mask(shards: Path | str, split: str, idx: np.ndarray) -> np.ndarray:
    """Whether each record idx of `split` is an activity-cliff molecule, as its record's name says
    (prep/sources/moleculeace.py writes the flag there; the baselines read the same names)."""
    metas, _ = split_meta(load_manifest(shards), split)
    flags = {int(meta["idx"]): cliff_flag(meta.get("name") or "") for meta in metas}
    missing = [int(i) for i in idx if int(i) not in flags]
    if missing:
        raise UserError(f"{shards}: split {split!r} holds no record {missing[0]}")
    return np.array([flags[int(i)] for i in idx], bool)


def cliff_rmse(shards: Path | str, split: str, idx: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """RMSE over the activity-cliff molecules among the records `idx` of `split` (MoleculeACE's second metric)."""
    return rmse_where(cliff_mask(shards, split, idx), y_pred, y_true)


def rmse_where(mask: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """RMSE of the first target over the labelled rows `mask` selects (the cliff molecules); NaN if none."""
    from sklearn.metrics import root_mean_squared_error

    mask = mask & ~np.isnan(y_true[:, 0])
    return float(root_mean_squared_error(y_true[mask, 0], y_pred[mask, 0])) if mask.any() else float("nan")
