"""ECFP4 of molecules and the similarities of fingerprints that the SVR members' kernels are made of.

ECFP4 = RDKit Morgan fingerprints, radius 2, 2,048 bits (or each bit's count), read from SMILES by
the sharder's own parse (its reasons for a molecule it does not read)."""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS, size_reason

RADIUS, BITS = 2, 2048


def ecfp(smiles: list[str], max_atoms: int = DEFAULT_MAX_ATOMS, counts: bool = False) -> np.ndarray:
    """[n, 2048] uint8 Morgan bits (radius 2) of each molecule, or with `counts` how often each bit is
    hit (ecfp_rows); a UserError for one that is not read."""
    bits, reasons = ecfp_rows(smiles, max_atoms, counts)
    row = next((i for i, reason in enumerate(reasons) if reason), None)
    if row is not None:
        raise UserError(f"SMILES {smiles[row][:80]!r} (row {row}) is not read ({reasons[row]})")
    return bits


def ecfp_rows(smiles: list[str], max_atoms: int = DEFAULT_MAX_ATOMS, counts: bool = False) -> tuple[np.ndarray, list[str]]:
    """([n, 2048] uint8 Morgan bits, radius 2, zero where a molecule is not read; [n] reasons, "" where
    it is). With `counts`, each bit's count of the atom environments hashed to it, capped at 255 (a
    drug-like molecule's rarely pass 60); its bits are exactly the counts that are not 0. A SMILES
    larger than `max_atoms` allows is refused before RDKit parses it (molecule_limits)."""
    from rdkit.Chem import rdFingerprintGenerator

    from gtscale.prep.featurize import FeaturizeError, parse_smiles  # the sharder's parse: its reasons, RDKit's log silenced

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=RADIUS, fpSize=BITS)
    fingerprint = generator.GetCountFingerprintAsNumPy if counts else generator.GetFingerprintAsNumPy
    out = np.zeros((len(smiles), BITS), dtype=np.uint8)
    reasons = [size_reason(s, max_atoms) or "" for s in smiles]
    for i, s in enumerate(smiles):
        if reasons[i]:
            continue
        try:
            out[i] = np.minimum(fingerprint(parse_smiles(s)), 255)
        except FeaturizeError as err:
            reasons[i] = err.reason
    return out, reasons


def tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto similarity of every row of a with every row of b (bit vectors)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    common = a @ b.T
    return common / np.maximum(a.sum(1)[:, None] + b.sum(1)[None, :] - common, 1e-12)


def minmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The MinMax (weighted Jaccard) similarity Σ_k min(a_k, b_k) / Σ_k max(a_k, b_k) of every row of a
    with every row of b (count vectors); Tanimoto's on bit vectors. Σ min is Σ_t over the levels t ≥ 1
    of the bits "count ≥ t" that both share: one matrix product per level, on the columns that reach it."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    shared = np.zeros((len(a), len(b)))
    level, top_a, top_b = 1, a.max(0, initial=0), b.max(0, initial=0)
    while (columns := np.flatnonzero((top_a >= level) & (top_b >= level))).size:
        shared += (a[:, columns] >= level).astype(np.float64) @ (b[:, columns] >= level).astype(np.float64).T
        level += 1
    return shared / np.maximum(a.sum(1)[:, None] + b.sum(1)[None, :] - shared, 1e-12)
