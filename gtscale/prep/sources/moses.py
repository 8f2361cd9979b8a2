"""MOSES (Polykovskiy et al., Front. Pharmacol. 2020): 1,936,962 drug-like ZINC molecules, as the
PyPI package molsets 0.3.1 ships them (moses/dataset/data/{train,test,test_scaffolds}.csv.gz, one
SMILES column), for pretraining (`gtscale shard moses --targets rdkit-fast`). Only the CSVs are
read, so the package may be installed with --no-deps (`pip install --no-deps molsets`, the
`moses` extra); its data folder is found without importing it (its __init__ imports torch models).

- splits: MOSES's own, train (1,584,663), test (176,074) and test_scaffolds (176,226: scaffolds
  absent from train); no targets of its own;
- idx: the row number across the three files in that order (train rows first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.prep.sources.base import MoleculeTable, package_data_folder, read_csv, require_columns, text_column

SPLITS = ("train", "test", "test_scaffolds")


def data_folder(root: Path | None = None) -> Path:
    """The folder of MOSES's CSVs: `root` if given, else the installed molsets package's."""
    return package_data_folder(root, "moses", "dataset/data", 'moses: the molsets package is not installed (pip install --no-deps molsets), or pass --root FOLDER with its CSVs')


def read_moses(root: Path | None = None, splits_read: tuple[str, ...] = SPLITS) -> MoleculeTable:
    """MOSES's molecules, of every split or of `splits_read` (idx then numbers the rows read)."""
    folder = data_folder(root)
    smiles, splits, sources = [], {}, []
    for split in splits_read:
        path = folder / f"{split}.csv.gz"
        frame = read_csv(path)
        require_columns(frame, ["SMILES"], path)
        splits[split] = np.arange(len(smiles), len(smiles) + len(frame), dtype=np.int64)
        smiles += text_column(frame["SMILES"])
        sources.append(path)
    if not smiles:
        raise UserError(f"{folder}: the MOSES CSVs hold no molecules")
    return MoleculeTable(
        name="moses",
        smiles=smiles,
        idx=np.arange(len(smiles), dtype=np.int64),
        targets=np.zeros((len(smiles), 0), np.float32),
        target_names=[],
        task_type="graph_regression",
        splits=splits,
        source_files=sources,
    )
