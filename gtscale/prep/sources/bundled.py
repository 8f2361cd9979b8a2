"""Sample datasets made from molecules that the installed RDKit package ships, so that a fresh
machine has real data to shard and train on:

- nci-tpsa: 4,999 NCI molecules (rdkit/Data/NCI/first_5K.smi) with their topological polar
  surface area from first_5k.tpsa.csv (Ertl's program) — graph regression.
- wehi-pains: 10,000 WEHI molecules (rdkit/Data/Pains/test_data/wehi_mols.csv), labelled 1 when
  RDKit's PAINS filter catalog matches — graph classification; a real rule set makes the label.

Splits are fixed: a permutation seeded with 0, 80/10/10.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import rdkit
from rdkit import Chem
from rdkit.Chem.FilterCatalog import FilterCatalog, FilterCatalogParams

from gtscale.prep.sources.base import MoleculeTable, read_csv, seeded_split, text_column
from gtscale.prep.sources.smiles import read_table
from gtscale.errors import UserError

RDKIT_DATA = Path(rdkit.__file__).parent / "Data"
NCI_SMILES = RDKIT_DATA / "NCI" / "first_5K.smi"
NCI_TPSA = RDKIT_DATA / "NCI" / "first_5k.tpsa.csv"
WEHI = RDKIT_DATA / "Pains" / "test_data" / "wehi_mols.csv"


def read_nci_tpsa() -> MoleculeTable:
    molecules = read_table(NCI_SMILES)  # columns "0" (SMILES), "1" (NCI id)
    tpsa = read_csv(NCI_TPSA, header=None, skiprows=1, names=["smiles", "tpsa"])  # line 1 is a comment
    if len(tpsa) != len(molecules) or not (tpsa["smiles"].to_numpy() == molecules["0"].to_numpy()).all():
        raise UserError(f"{NCI_TPSA}: rows do not line up with {NCI_SMILES}")
    return MoleculeTable(
        name="nci-tpsa",
        smiles=molecules["0"].tolist(),
        idx=molecules["1"].to_numpy(dtype=np.int64),
        targets=tpsa[["tpsa"]].to_numpy(dtype=np.float32),
        target_names=["tpsa"],
        task_type="graph_regression",
        splits=seeded_split(len(molecules)),
        source_files=[NCI_SMILES, NCI_TPSA],
    )


def pains_labels(smiles: list[str], workers: int | None = None) -> np.ndarray:
    """1.0 where RDKit's PAINS catalog (families A, B, C) matches the molecule, NaN if unparsable.
    Matching 480 substructure patterns costs ~3.5 ms per molecule, so the molecules are split
    across `workers` forked processes (default: the CPUs this process may use)."""
    workers = workers or len(os.sched_getaffinity(0))
    if workers <= 1 or len(smiles) < 4 * _PAINS_CHUNK:
        return _pains_chunk(smiles)
    chunks = [smiles[i:i + _PAINS_CHUNK] for i in range(0, len(smiles), _PAINS_CHUNK)]
    with mp.get_context("fork").Pool(workers) as pool:
        return np.concatenate(pool.map(_pains_chunk, chunks))


_PAINS_CHUNK = 250


def _pains_chunk(smiles: list[str]) -> np.ndarray:
    params = FilterCatalogParams()
    params.AddCatalog(FilterCatalogParams.FilterCatalogs.PAINS)
    catalog = FilterCatalog(params)
    labels = np.full(len(smiles), np.nan, dtype=np.float32)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is not None:
            labels[i] = float(catalog.HasMatch(mol))
    return labels


def read_wehi_pains() -> MoleculeTable:
    frame = read_csv(WEHI, header=None, names=["smiles", "wehi_id"])
    smiles = text_column(frame["smiles"])
    return MoleculeTable(
        name="wehi-pains",
        smiles=smiles,
        idx=np.arange(len(frame), dtype=np.int64),
        targets=pains_labels(smiles)[:, None],
        target_names=["pains"],
        task_type="graph_classification",
        splits=seeded_split(len(frame)),
        source_files=[WEHI],
        names=[n or None for n in text_column(frame["wehi_id"])],
    )
