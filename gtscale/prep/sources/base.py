"""What every dataset reader returns: molecules as SMILES rows, their targets and their splits.

A reader only reads its dataset's files in their real on-disk layout and checks them; it never
featurizes. Rows keep the dataset's own idx (the row number OGB uses), which travels into every
record's meta and back out of the trainer's gathered predictions.
"""

from __future__ import annotations

import importlib.util

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from gtscale.errors import UserError

TaskType = Literal["graph_regression", "graph_classification"]


@dataclass
class MoleculeTable:
    """A molecular dataset as read from disk.

    smiles[r], idx[r] and targets[r] describe row r; splits map a split name to row numbers.
    Targets are float32 with NaN where a label is missing (MolPCBA, unlabelled test splits); a
    molecule with an infinite target is rejected when sharded (target_not_finite), and a column
    with no finite value at all is refused here: it would train on nothing (loss 0.0)."""

    name: str
    smiles: list[str]
    idx: np.ndarray  # int64 [R], the dataset's own molecule index
    targets: np.ndarray  # float32 [R, T]
    target_names: list[str]
    task_type: TaskType
    splits: dict[str, np.ndarray]  # split → row numbers (int64)
    source_files: list[Path] = field(default_factory=list)
    names: list[str | None] | None = None  # the dataset's own ids where they are not integers (None: blank); into meta["name"]

    def __post_init__(self):
        rows = len(self.smiles)
        if self.idx.shape != (rows,) or self.targets.shape[0] != rows:
            raise ValueError(f"{self.name}: smiles, idx and targets disagree in length")
        for split, members in self.splits.items():
            if len(members) and (members.min() < 0 or members.max() >= rows):
                raise UserError(f"{self.name}: split {split!r} names rows outside 0..{rows - 1}")
        if rows:
            empty = np.flatnonzero(~np.isfinite(self.targets).any(axis=0))
            if len(empty):
                where = self.source_files[0] if self.source_files else self.name
                raise UserError(f"{where}: target column {self.target_names[empty[0]]!r} has no finite value in {rows} rows")


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise UserError(f"{path}: source file not found")
    return path


def read_csv(path: Path, **kwargs) -> pd.DataFrame:
    """pandas.read_csv with a one-line error naming the file when it is not a readable CSV."""
    require_file(path)
    try:
        return pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as err:
        raise UserError(f"{path}: not a readable CSV ({str(err).splitlines()[0]})") from err


def require_columns(frame: pd.DataFrame, columns: list[str], path: Path) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: missing column {missing[0]!r} (has {', '.join(map(str, frame.columns))})")


def text_column(column: pd.Series) -> list[str]:
    """A column as strings, "" where the cell is empty. (pandas 3 keeps NaN through astype(str), so
    an empty SMILES cell would otherwise reach RDKit as a float.)"""
    return column.astype(object).where(column.notna(), "").astype(str).tolist()


def seeded_split(rows: int, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """Fixed train/valid/test split by a seeded permutation (for datasets that ship none)."""
    order = np.random.default_rng(seed).permutation(rows)
    n_train = int(round(fractions[0] * rows))
    n_valid = int(round(fractions[1] * rows))
    return {
        "train": np.sort(order[:n_train]),
        "valid": np.sort(order[n_train : n_train + n_valid]),
        "test": np.sort(order[n_train + n_valid :]),
    }


def package_data_folder(root: Path | None, package: str, subpath: str, missing: str) -> Path:
    """The folder of a data package's files: `root` if given, else `subpath` inside the installed
    `package`, located without running its __init__ (data packages pin what breaks RDKit);
    `missing`: the one-line error when neither is there."""
    if root is not None:
        return root
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(missing)
    return Path(list(spec.submodule_search_locations)[0]) / subpath
