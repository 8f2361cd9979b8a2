"""MoleculeACE (van Tilborg, Alenicheva, Grisoni, JCIM 2022): 30 ChEMBL bioactivity sets with
activity cliffs marked, as the PyPI package MoleculeACE 3.0.0 installs them
(MoleculeACE/Data/benchmark_data/CHEMBL*_{Ki,EC50}.csv; columns smiles, exp_mean [nM], y,
cliff_mol, split). Only the CSVs are read, so the package may be installed with --no-deps
(`pip install 'gtscale[moleculeace]'`); its data folder is found without importing it.

- target: `y`, the benchmark's regression target (−log10 of exp_mean in nM);
- splits: the file's test split as given; validation is carved from its train split by a seeded
  permutation (`valid_fraction`, default 10 %), the rest stays train;
- idx: the row number in the CSV; meta["name"] is "<dataset>:<row>:cliff_mol=<0|1>", so that the
  activity-cliff RMSE (the benchmark's second metric: RMSE over test molecules with cliff_mol = 1)
  is computed from the shards alone, matched by record idx (`cliff_rmse`); the manifest names the
  dataset `moleculeace-<set>-seed<k>` (the seed that carved validation from the train split).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.format.record_meta import split_meta
from gtscale.prep.sources.base import MoleculeTable, package_data_folder, read_csv, require_columns

COLUMNS = ["smiles", "exp_mean [nM]", "y", "cliff_mol", "split"]
VALID_FRACTION = 0.1
#: The dataset name in the manifest of a MoleculeACE shard folder.
NAME = re.compile(r"moleculeace-(CHEMBL\w+?)-seed(\d+)")


def data_folder(root: Path | None = None) -> Path:
    """The folder of MoleculeACE's benchmark CSVs: `root` if given, else the installed package's."""
    return package_data_folder(root, "MoleculeACE", "Data/benchmark_data",
                               "moleculeace: the MoleculeACE package is not installed (pip install --no-deps 'moleculeace>=3,<4'), "
                               "or pass --root FOLDER with its CSVs")


def available(root: Path | None = None) -> list[str]:
    """Names of the bundled sets (CHEMBL214_Ki, …), sorted."""
    return sorted(p.stem for p in data_folder(root).glob("CHEMBL*_*.csv"))


def carve_valid(train_rows: np.ndarray, seed: int, fraction: float = VALID_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid) row numbers: a seeded permutation of the train rows, `fraction` of them valid."""
    order = np.random.default_rng(seed).permutation(train_rows)
    n_valid = int(round(fraction * len(train_rows)))
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


def cliff_flag(name: str) -> bool:
    """Whether a record's meta["name"] marks an activity-cliff molecule."""
    return name.rsplit(":", 1)[-1] == "cliff_mol=1"



def is_moleculeace(shards: Path | str) -> bool:
    return NAME.fullmatch(str(load_manifest(shards)["dataset"])) is not None


def cliff_mask(shards: Path | str, split: str, idx: np.ndarray) -> np.ndarray:
    """Whether each record idx of `split` is an activity-cliff molecule, as its record's name says
    (read_moleculeace writes the flag there; the baselines read the same names)."""
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


def read_moleculeace(dataset: str | None, root: Path | None = None, seed: int = 0, valid_fraction: float = VALID_FRACTION) -> MoleculeTable:
    folder = data_folder(root)
    known = available(root)
    if not dataset:
        raise UserError(f"moleculeace needs --dataset NAME (one of: {', '.join(known) or 'none found in ' + str(folder)})")
    if dataset not in known:
        raise UserError(f"moleculeace: no dataset {dataset!r} in {folder} (known: {', '.join(known)})")
    path = folder / f"{dataset}.csv"
    frame = read_csv(path)
    require_columns(frame, COLUMNS, path)
    split = frame["split"].astype(str)
    unknown = sorted(set(split) - {"train", "test"})
    if unknown:
        raise UserError(f"{path}: split column holds {unknown[0]!r}; expected train or test")
    cliff = frame["cliff_mol"]
    if not cliff.isin([0, 1]).all():
        raise UserError(f"{path}: cliff_mol must be 0 or 1 (row {int(np.flatnonzero(~cliff.isin([0, 1]).to_numpy())[0])})")
    try:
        targets = frame[["y"]].to_numpy(dtype=np.float32)
    except ValueError as err:
        raise UserError(f"{path}: column y must be numeric ({err})") from err
    train, valid = carve_valid(np.flatnonzero((split == "train").to_numpy()), seed, valid_fraction)
    rows = np.arange(len(frame), dtype=np.int64)
    return MoleculeTable(
        name=f"moleculeace-{dataset}-seed{seed}",  # the seed shapes the splits: part of the run's fingerprint
        smiles=frame["smiles"].astype(str).tolist(),
        idx=rows,
        targets=targets,
        target_names=["y"],
        task_type="graph_regression",
        splits={"train": train, "valid": valid, "test": np.flatnonzero((split == "test").to_numpy())},
        source_files=[path],
        names=[f"{dataset}:{r}:cliff_mol={int(c)}" for r, c in zip(rows, cliff)],
    )
