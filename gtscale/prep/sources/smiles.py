"""SMILES tables: CSV (with a header) or .smi (whitespace-separated, no header; columns are named
by position, "0", "1", …), compressed or not (base.COMPRESSIONS), with a chosen SMILES, id and
target columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gtscale.prep.sources.base import COMPRESSIONS, MoleculeTable, TaskType, read_csv, require_columns, seeded_split, text_column
from gtscale.errors import UserError


def is_smi(path: Path) -> bool:
    """Whether `path` names a .smi file, compressed or not."""
    suffixes = [s for s in path.suffixes if s.lower() not in COMPRESSIONS]
    return bool(suffixes) and suffixes[-1] == ".smi"


def read_table(path: Path) -> pd.DataFrame:
    if is_smi(path):
        frame = read_csv(path, sep=r"\s+", header=None)  # no comment char: "#" is a SMILES triple bond
        frame.columns = [str(c) for c in frame.columns]
        return frame
    return read_csv(path)


def _ids(frame: pd.DataFrame, id_column: str | None, path: Path) -> tuple[np.ndarray, list[str | None] | None]:
    """(idx, names): the id column as idx when it holds integers; otherwise row numbers as idx and
    the ids as names, which travel in each record's meta["name"] (left out where the cell is blank:
    the record's idx still identifies it)."""
    if id_column is None:
        return np.arange(len(frame), dtype=np.int64), None
    column = frame[id_column]
    given = column[column.notna()]
    if not given.is_unique:
        raise UserError(f"{path}: id column {id_column!r} has duplicate values (e.g. {given[given.duplicated()].iloc[0]!r})")
    if pd.api.types.is_integer_dtype(column):
        return column.to_numpy(dtype=np.int64), None
    return np.arange(len(frame), dtype=np.int64), [name or None for name in text_column(column)]


def _splits(frame: pd.DataFrame, split_column: str, path: Path) -> dict[str, np.ndarray]:
    """split name → rows; a blank label is an error naming its row (1 = the first data row)."""
    labels = text_column(frame[split_column])
    blank = next((i for i, label in enumerate(labels) if not label.strip()), None)
    if blank is not None:
        raise UserError(f"{path}: data row {blank + 1} has a blank split label in column {split_column!r}")
    labels = np.asarray(labels)
    return {name: np.flatnonzero(labels == name) for name in sorted(set(labels.tolist()))}


def not_numeric(frame: pd.DataFrame, columns: list[str]) -> str | None:
    """Where the first cell of `columns` that is no number is ("column 'y' holds 'active' (data row 3)"), if any."""
    for column in columns:
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = np.flatnonzero(numbers.isna().to_numpy() & frame[column].notna().to_numpy())
        if len(bad):
            return f"column {column!r} holds {str(frame[column].iloc[bad[0]])[:40]!r} (data row {bad[0] + 1})"
    return None


def read_smiles_table(
    path: Path,
    smiles_column: str,
    target_columns: list[str],
    task_type: TaskType,
    id_column: str | None = None,
    split_column: str | None = None,
    seed: int = 0,
) -> MoleculeTable:
    frame = read_table(path)
    require_columns(frame, [smiles_column, *target_columns] + [c for c in (id_column, split_column) if c], path)
    if split_column:
        splits = _splits(frame, split_column, path)
    else:
        splits = seeded_split(len(frame), seed)
    try:
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, which the sharder rejects as target_not_finite
            targets = frame[target_columns].to_numpy(dtype=np.float32) if target_columns else np.zeros((len(frame), 0), np.float32)
    except ValueError as err:
        raise UserError(f"{path}: target columns must be numeric (a classification's: 0 and 1); {not_numeric(frame, target_columns) or err}") from err
    idx, names = _ids(frame, id_column, path)
    return MoleculeTable(
        name=path.name,
        smiles=text_column(frame[smiles_column]),
        idx=idx,
        targets=targets,
        target_names=list(target_columns),
        task_type=task_type,
        splits=splits,
        source_files=[path],
        names=names,
    )
