"""The batch the model benchmarks train on: a fixed, seeded sample of real molecules with
PCQM4Mv2's size distribution, through the data pipeline itself.

The molecules: RDKit's bundled NCI sample (Data/NCI/first_5K.smi) with 1..51 heavy atoms
(PCQM4Mv2's range; at most the caller's limit), drawn without replacement with weights
exp(λ·atoms), λ solved so that the weighted mean is PCQM4Mv2's 14.1 atoms: the distribution
closest to NCI's own (in KL divergence) with PCQM4Mv2's mean. The batch: gtscale.prep.featurize
(identical to ogb.utils.smiles2graph), .structure, and the dense Batch of loader.collate.
`gtscale bench model` (with and without --authors) and `gtscale bench loader` use it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.loader.batch import Batch

#: PCQM4Mv2's heavy-atom counts: 1..51, mean 14.1.
PCQM4MV2_MAX_ATOMS = 51
PCQM4MV2_MEAN_ATOMS = 14.1


def _nci_smiles() -> list[tuple[str, int]]:
    """(SMILES, heavy atoms) of every parsable molecule in RDKit's NCI sample."""
    from rdkit import Chem, RDConfig, RDLogger

    RDLogger.DisableLog("rdApp.*")
    path = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
    out = []
    for line in path.read_text().splitlines():
        smiles = line.split()[0] if line.strip() else ""
        mol = Chem.MolFromSmiles(smiles) if smiles else None
        if mol is not None and mol.GetNumAtoms() > 0:
            out.append((smiles, mol.GetNumAtoms()))
    return out


def _tilt(sizes: np.ndarray, mean: float) -> np.ndarray:
    """Probabilities ∝ exp(λ·size) whose mean size is `mean` (bisection on λ)."""
    lo, hi = -5.0, 5.0
    for _ in range(100):
        lam = (lo + hi) / 2
        w = np.exp(lam * (sizes - sizes.mean()))
        if (w * sizes).sum() / w.sum() > mean:
            hi = lam
        else:
            lo = lam
    return w / w.sum()


def sample_molecules(count: int, seed: int, max_atoms: int) -> list[str]:
    """`count` NCI SMILES with PCQM4Mv2's size range and mean, fixed by `seed`."""
    pool = [(s, n) for s, n in _nci_smiles() if 1 <= n <= min(max_atoms, PCQM4MV2_MAX_ATOMS)]
    if len(pool) < count:
        raise UserError(f"--batch-size: only {len(pool)} NCI molecules have at most {max_atoms} atoms")
    sizes = np.array([n for _, n in pool], dtype=np.float64)
    chosen = np.random.default_rng(seed).choice(len(pool), size=count, replace=False, p=_tilt(sizes, PCQM4MV2_MEAN_ATOMS))
    return [pool[i][0] for i in chosen]


def molecule_batch(smiles: list[str], pad_to: int | None, svd_rank: int, path_hops: int, lap_k: int = 0) -> Batch:
    """Dense Batch of the molecules through the data pipeline's own featurizer, structure and
    collate, padded to the largest molecule or to `pad_to` nodes."""
    from gtscale.loader.collate import collate
    from gtscale.format.decode import Record
    from gtscale.prep.featurize import featurize_smiles
    from gtscale.prep.structure import StructureOptions, structure

    options = StructureOptions(svd_rank=max(svd_rank, 1), lap_k=lap_k)
    records = []
    for i, s in enumerate(smiles):
        arrays = featurize_smiles(s)
        n = arrays[schema.NODE_FEAT].shape[0]
        arrays.update(structure(arrays[schema.EDGE_INDEX], n, options))
        records.append(Record(key=f"nci-{i}", shard="bench", num_nodes=n, idx=i, arrays=arrays))
    keys = (schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE) + ((schema.LAP_PE,) if lap_k else ())
    batch = collate(records, keys, max_dist=max(path_hops, 1))
    return batch.padded(batch.num_graphs, pad_to) if pad_to and pad_to > batch.max_graph_nodes else batch

