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

`--targets rdkit-fast` takes the cheap subset FAST instead (set name `rdkit-fast-<version>`), for
corpora of millions (MOSES): ten descriptors that cost ~0.1 ms per molecule together on an idle
core, where all 217 cost ~10 ms (measured in docs/moses.md). QED is left out: it alone costs
several times that budget (it matches ~100 substructure alerts).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from dataclasses import replace

import numpy as np
import rdkit
from rdkit import Chem, RDLogger
from rdkit.Chem import Descriptors
from tqdm import tqdm

from gtscale.prep.sources import fast_descriptors
from gtscale.prep.sources.base import MoleculeTable

SET_NAME = f"rdkit-descriptors-{rdkit.__version__}"
FAST_SET_NAME = f"rdkit-fast-{rdkit.__version__}"
CLIP = 6.0
#: The cheap descriptors of `--targets rdkit-fast`, names of Descriptors._descList.
FAST = ("MolWt", "MolLogP", "TPSA", "MolMR", "RingCount", "NumHDonors", "NumHAcceptors", "NumRotatableBonds", "NumHeteroatoms",
        "FractionCSP3")


def descriptor_names() -> list[str]:
    return [name for name, _ in Descriptors._descList]


def _functions(names: tuple[str, ...] | None) -> list:
    if names is None:
        return [fn for _, fn in Descriptors._descList]
    table = dict(Descriptors._descList)
    return [table[name] for name in names]


def _compute(smiles: str, names: tuple[str, ...] | None = None) -> np.ndarray:
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    return np.full(len(names or Descriptors._descList), np.nan) if mol is None else descriptor_values(mol, names)


def descriptor_values(mol: Chem.Mol, names: tuple[str, ...] | None = None) -> np.ndarray:
    """float64 [D] of the named descriptors (default: every one) of the molecule, NaN where RDKit
    raises: `reference_values`' floats, with what several descriptors share computed once
    (fast_descriptors.py)."""
    return fast_descriptors.values(mol, names)


def reference_values(mol: Chem.Mol, names: tuple[str, ...] | None = None) -> np.ndarray:
    """descriptor_values as RDKit's functions give them, one call each: the tests' oracle."""
    return fast_descriptors.nan_where_raising(_functions(names), mol)


def compute_descriptors(smiles: list[str], workers: int = 1, progress: bool = True, names: tuple[str, ...] | None = None) -> np.ndarray:
    """float64 [R, D] raw values of the named descriptors (default: every one), inf/too-large → NaN."""
    bar = dict(total=len(smiles), desc="rdkit descriptors", unit="mol", disable=not progress)
    compute = functools.partial(_compute, names=names)
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            rows = list(tqdm(pool.imap(compute, smiles, chunksize=64), **bar))
    else:
        rows = [compute(s) for s in tqdm(smiles, **bar)]
    values = np.stack(rows) if rows else np.zeros((0, len(names or descriptor_names())))
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


def with_descriptor_targets(table: MoleculeTable, workers: int = 1, progress: bool = True, names: tuple[str, ...] | None = None) -> MoleculeTable:
    """The table with its targets replaced by standardised RDKit descriptors: the named ones
    (FAST: `--targets rdkit-fast`), default every one."""
    values = compute_descriptors(table.smiles, workers, progress, names)
    train_rows = table.splits.get("train", np.arange(len(table.smiles)))
    targets, keep = standardise(values, train_rows)
    kept = [n for n, k in zip(names or descriptor_names(), keep) if k]
    set_name = FAST_SET_NAME if names == FAST else SET_NAME if names is None else f"rdkit-{len(names)}-{rdkit.__version__}"
    return replace(table, name=f"{table.name}+{set_name}", targets=targets, target_names=kept, task_type="graph_regression")
