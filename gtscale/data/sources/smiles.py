"""SMILES tables: CSV (with a header) or .smi (whitespace-separated, no header; columns are named
by position, "0", "1", …), gzipped or not, with a chosen SMILES, id and target columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gtscale.data.sources.base import MoleculeTable, TaskType, read_csv, require_columns, seeded_split
from gtscale.errors import UserError


def _is_smi(path: Path) -> bool:
    suffixes = [s for s in path.suffixes if s != ".gz"]
    return bool(suffixes) and suffixes[-1] == ".smi"


def read_table(path: Path) -> pd.DataFrame:
    if _is_smi(path):
        frame = read_csv(path, sep=r"\s+", header=None)  # no comment char: "#" is a SMILES triple bond
        frame.columns = [str(c) for c in frame.columns]
        return frame
    return read_csv(path)


def _ids(frame: pd.DataFrame, id_column: str | None, path: Path) -> np.ndarray:
    """The id column when it holds unique integers, else row numbers (ids travel in meta as names)."""
    if id_column is None:
        return np.arange(len(frame), dtype=np.int64)
    column = frame[id_column]
    if pd.api.types.is_integer_dtype(column) and column.is_unique:
        return column.to_numpy(dtype=np.int64)
    if not column.is_unique:
        raise UserError(f"{path}: id column {id_column!r} has duplicate values")
    return np.arange(len(frame), dtype=np.int64)


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
        labels = frame[split_column].astype(str)
        splits = {name: np.flatnonzero((labels == name).to_numpy()) for name in sorted(labels.unique())}
    else:
        splits = seeded_split(len(frame), seed)
    try:
        targets = frame[target_columns].to_numpy(dtype=np.float32) if target_columns else np.zeros((len(frame), 0), np.float32)
    except ValueError as err:
        raise UserError(f"{path}: target columns must be numeric ({err})") from err
    return MoleculeTable(
        name=path.name,
        smiles=frame[smiles_column].astype(str).tolist(),
        idx=_ids(frame, id_column, path),
        targets=targets,
        target_names=list(target_columns),
        task_type=task_type,
        splits=splits,
        source_files=[path],
    )
