"""What every dataset reader returns: molecules as SMILES rows, their targets and their splits.

A reader only reads its dataset's files in their real on-disk layout and checks them; it never
featurizes. Rows keep the dataset's own idx (the row number OGB uses), which travels into every
record's meta and back out of the trainer's gathered predictions.
"""

from __future__ import annotations

import gzip
import importlib.util
import lzma
import zipfile
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


#: A CSV's compression by its file name's last suffix (pandas' names): what pandas reads with the
#: standard library, and zstd where the zstandard module is installed.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zip": "zip", ".zst": "zstd"}


def compression(path: Path) -> str | None:
    """The compression to read `path` with (None: plain text); a UserError for one it cannot read."""
    suffix = path.suffix.lower()
    if suffix in (".tar", ".tgz") or path.name.lower().endswith((".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")):
        raise UserError(f"{path}: a tar archive; give the CSV itself, or compressed as .gz, .bz2, .xz or a one-file .zip")
    method = COMPRESSIONS.get(suffix)
    if method == "zstd" and importlib.util.find_spec("zstandard") is None:
        raise UserError(f"{path}: reading .zst needs the zstandard module (pip install zstandard); or decompress it first")
    if method == "zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = [m.filename for m in archive.infolist() if not m.is_dir()]
        except (zipfile.BadZipFile, OSError) as err:
            raise UserError(f"{path}: not a readable .zip ({err})") from err
        if len(members) != 1:
            raise UserError(f"{path}: a .zip of {len(members)} files ({', '.join(members[:3])}{', …' if len(members) > 3 else ''}); "
                            "give a .zip of one CSV")
    return method


def _decompression_errors() -> tuple[type[BaseException], ...]:
    """What a damaged .gz, .bz2, .xz, .zip or .zst raises while pandas reads it."""
    errors: tuple[type[BaseException], ...] = (gzip.BadGzipFile, lzma.LZMAError, zipfile.BadZipFile, EOFError, OSError)
    if importlib.util.find_spec("zstandard") is not None:
        import zstandard

        errors += (zstandard.ZstdError,)
    return errors


def read_csv(path: Path, **kwargs) -> pd.DataFrame:
    """pandas.read_csv, decompressing by the file name (COMPRESSIONS), with a one-line error naming
    the file when it is not a readable CSV."""
    require_file(path)
    method = compression(path)
    try:
        return pd.read_csv(path, compression=method, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, *_decompression_errors()) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path}: not a readable CSV ({detail})") from err


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


def scaffold_split(smiles: list[str], seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """Train/valid/test split by Bemis–Murcko scaffold: molecules sharing a scaffold share a split,
    so valid and test hold chemotypes train never saw. The balanced rule of chemprop and DeepChem:
    scaffold sets larger than half the valid or test share go to train first (so that no split is
    one large set), the others in a seeded random order; train is filled, then valid, then test.
    A SMILES RDKit cannot read forms a set of its own (the sharder rejects it later)."""
    groups = scaffold_groups(smiles)
    n_train, n_valid = int(round(fractions[0] * len(smiles))), int(round(fractions[1] * len(smiles)))
    n_test = len(smiles) - n_train - n_valid
    sets = list(groups.values())
    big = [g for g in sets if len(g) > n_valid / 2 or len(g) > n_test / 2]
    small = [g for g in sets if not (len(g) > n_valid / 2 or len(g) > n_test / 2)]
    np.random.default_rng(seed).shuffle(small)
    splits: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for group in sorted(big, key=len, reverse=True) + small:
        if len(splits["train"]) + len(group) <= n_train:
            splits["train"] += group
        elif len(splits["valid"]) + len(group) <= n_valid:
            splits["valid"] += group
        else:
            splits["test"] += group
    return {name: np.array(sorted(rows), dtype=np.int64) for name, rows in splits.items()}


def scaffold_groups(smiles: list[str]) -> dict[str, list[int]]:
    """Bemis–Murcko scaffold (an acyclic molecule's is "") → the rows of the molecules that have it;
    a SMILES RDKit cannot read forms a set of its own."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem.Scaffolds import MurckoScaffold

    RDLogger.DisableLog("rdApp.*")
    groups: dict[str, list[int]] = {}
    for row, text in enumerate(smiles):
        mol = Chem.MolFromSmiles(text) if text and len(text) < 100_000 else None
        key = MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False) if mol is not None else f"<unread {row}>"
        groups.setdefault(key, []).append(row)
    return groups


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
