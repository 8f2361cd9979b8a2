"""RDKit descriptors as multi-task regression targets (`gtscale shard … --targets rdkit-descriptors`),
the pretraining recipe of MolBERT and ChemBERTa-2 (MTR): every descriptor of RDKit's
`Descriptors._descList` (217 in RDKit 2026.09) computed per molecule, then standardised.

- the set is named and versioned: the dataset name (→ manifest "dataset", and the sharding run's
  fingerprint) carries `rdkit-descriptors-<RDKit version>`, the target names are the descriptors';
- standardised with the train split's mean and standard deviation (z-scores), clipped to ±CLIP so
  that the few heavy-tailed descriptors (Ipc, …) cannot dominate a squared loss;
- a value RDKit cannot compute (NaN, inf) is a missing label (NaN), which the loss masks;
  descriptors constant or missing on all of train are dropped (they carry nothing to learn);
- molecules RDKit cannot parse keep all-NaN targets; the sharder rejects them anyway.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import numpy as np
import rdkit
from rdkit import Chem, RDLogger
from rdkit.Chem import Descriptors
from tqdm import tqdm

from gtscale.prep.sources.base import MoleculeTable

SET_NAME = f"rdkit-descriptors-{rdkit.__version__}"
CLIP = 6.0


def descriptor_names() -> list[str]:
    return [name for name, _ in Descriptors._descList]


def _compute(smiles: str) -> np.ndarray:
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    return np.full(len(Descriptors._descList), np.nan) if mol is None else descriptor_values(mol)


def descriptor_values(mol: Chem.Mol) -> np.ndarray:
    """float64 [D] of every descriptor of the molecule, NaN where RDKit raises."""
    values = np.full(len(Descriptors._descList), np.nan)
    for k, (_, fn) in enumerate(Descriptors._descList):
        try:
            values[k] = fn(mol)
        except Exception:  # RDKit raises on a few descriptors for exotic molecules: a missing label
            pass
    return values


def compute_descriptors(smiles: list[str], workers: int = 1, progress: bool = True) -> np.ndarray:
    """float64 [R, D] raw descriptor values, inf/too-large → NaN."""
    bar = dict(total=len(smiles), desc="rdkit descriptors", unit="mol", disable=not progress)
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            rows = list(tqdm(pool.imap(_compute, smiles, chunksize=64), **bar))
    else:
        rows = [_compute(s) for s in tqdm(smiles, **bar)]
    values = np.stack(rows) if rows else np.zeros((0, len(descriptor_names())))
    values[~np.isfinite(values) | (np.abs(values) > 1e30)] = np.nan
    return values


def standardise(values: np.ndarray, train_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z-scores clipped to ±CLIP as float32, kept column mask) with train statistics."""
    train = values[train_rows]
    labelled = np.isfinite(train).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(labelled > 0, train, 0.0), axis=0)
        std = np.nanstd(np.where(labelled > 0, train, 0.0), axis=0)
    keep = (labelled > 1) & (std > 1e-12)
    z = (values[:, keep] - mean[keep]) / std[keep]
    return np.clip(z, -CLIP, CLIP).astype(np.float32), keep


def with_descriptor_targets(table: MoleculeTable, workers: int = 1, progress: bool = True) -> MoleculeTable:
    """The table with its targets replaced by standardised RDKit descriptors."""
    values = compute_descriptors(table.smiles, workers, progress)
    train_rows = table.splits.get("train", np.arange(len(table.smiles)))
    targets, keep = standardise(values, train_rows)
    names = [n for n, k in zip(descriptor_names(), keep) if k]
    return replace(table, name=f"{table.name}+{SET_NAME}", targets=targets, target_names=names, task_type="graph_regression")
