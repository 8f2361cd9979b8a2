"""OGB molecular datasets in the layouts their downloads unpack to.

PCQM4Mv2 (OGB-LSC):            <root>/pcqm4m-v2/raw/data.csv.gz      idx,smiles,homolumogap
                               <root>/pcqm4m-v2/split_dict.pt        train/valid/test-dev/test-challenge
ogbg-molhiv / ogbg-molpcba:    <root>/ogbg_molhiv/mapping/mol.csv.gz task columns, smiles, mol_id
                               <root>/ogbg_molhiv/split/scaffold/{train,valid,test}.csv.gz

`root` may also be the dataset folder itself. OGB builds its graphs from exactly these SMILES
with smiles2graph, so featurizing them reproduces OGB's graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gtscale.prep.sources.base import MoleculeTable, read_csv, require_columns, require_file, text_column
from gtscale.errors import UserError
from gtscale.io import load_failure_detail, refused_global, safe_torch_load

PCQM4MV2_SPLITS = ("train", "valid", "test-dev", "test-challenge")


def _dataset_dir(root: Path, folder: str) -> Path:
    return root if root.name == folder else root / folder


def load_split_dict(path: Path) -> dict[str, np.ndarray]:
    """split_dict.pt → {split: int64 row numbers}, loaded with weights_only=True (no arbitrary unpickling)."""
    require_file(path)
    try:
        raw = safe_torch_load(path)
    except Exception as err:  # refused, or unreadable: empty, cut short (EOFError, IndexError, struct.error), garbage
        what = refused_global(err)
        if what is not None:
            raise UserError(f"{path}: refused: loading it would run code ({what} is not a plain index array)") from err
        raise UserError(f"{path}: not a readable torch file, corrupt or truncated ({load_failure_detail(err)})") from err
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a dict of split name → indices, got {type(raw).__name__}")
    return {str(k): np.asarray(torch.as_tensor(v).numpy() if isinstance(v, torch.Tensor) else v, dtype=np.int64) for k, v in raw.items()}


def read_pcqm4mv2(root: Path) -> MoleculeTable:
    folder = _dataset_dir(root, "pcqm4m-v2")
    data_path = require_file(folder / "raw" / "data.csv.gz")
    split_path = require_file(folder / "split_dict.pt")
    frame = read_csv(data_path)
    require_columns(frame, ["idx", "smiles", "homolumogap"], data_path)
    splits = load_split_dict(split_path)
    missing = [s for s in PCQM4MV2_SPLITS if s not in splits]
    if missing:
        raise UserError(f"{split_path}: missing split {missing[0]!r}")
    idx = frame["idx"].to_numpy(dtype=np.int64)
    if not np.array_equal(idx, np.arange(len(frame))):
        raise UserError(f"{data_path}: column idx must number the rows 0..{len(frame) - 1}")
    return MoleculeTable(
        name="pcqm4mv2",
        smiles=text_column(frame["smiles"]),
        idx=idx,
        targets=frame[["homolumogap"]].to_numpy(dtype=np.float32),
        target_names=["homolumogap"],
        task_type="graph_regression",
        splits={s: splits[s] for s in PCQM4MV2_SPLITS},
        source_files=[data_path, split_path],
    )


def read_ogbg_mol(root: Path, name: str) -> MoleculeTable:
    """ogbg-molhiv, ogbg-molpcba (or any ogbg-mol* with a scaffold split)."""
    folder = _dataset_dir(root, name.replace("-", "_"))
    mapping_path = require_file(folder / "mapping" / "mol.csv.gz")
    split_dir = folder / "split" / "scaffold"
    frame = read_csv(mapping_path)
    require_columns(frame, ["smiles"], mapping_path)
    task_columns = [c for c in frame.columns if c not in ("smiles", "mol_id")]
    if not task_columns:
        raise UserError(f"{mapping_path}: no task columns besides smiles and mol_id")
    splits = {}
    for split in ("train", "valid", "test"):
        path = split_dir / f"{split}.csv.gz"
        try:
            splits[split] = read_csv(path, header=None).to_numpy(dtype=np.int64).ravel()
        except ValueError as err:
            raise UserError(f"{path}: split files hold one integer row index per line ({err})") from err
    return MoleculeTable(
        name=name,
        smiles=text_column(frame["smiles"]),
        idx=np.arange(len(frame), dtype=np.int64),
        targets=frame[task_columns].to_numpy(dtype=np.float32),
        target_names=task_columns,
        task_type="graph_classification",
        splits=splits,
        source_files=[mapping_path] + [split_dir / f"{s}.csv.gz" for s in ("train", "valid", "test")],
    )
