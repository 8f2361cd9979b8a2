"""`offline-union`: the unique molecules available without a download, for descriptor pretraining
(`gtscale shard offline-union --targets rdkit-descriptors`): the train splits of MoleculeACE's 30
sets and RDKit's NCI first_5K molecules (the PCQM4Mv2-layout test fixtures are NCI molecules too).

MoleculeACE's test molecules are left out, so that a model pretrained here and fine-tuned on a
MoleculeACE set has never seen that set's test molecules. Molecules are deduplicated by RDKit
canonical SMILES (unparsable ones are kept as given; the sharder rejects them). The split is a
seeded permutation, 95 % train / 5 % valid. The table has no targets of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rdkit import Chem, RDLogger

from gtscale.prep.sources import moleculeace
from gtscale.prep.sources.base import MoleculeTable, read_csv, seeded_split
from gtscale.prep.sources.bundled import NCI_SMILES
from gtscale.prep.sources.smiles import read_table


def canonical(smiles: str) -> str:
    mol = Chem.MolFromSmiles(smiles)
    return Chem.MolToSmiles(mol) if mol is not None else smiles


def read_offline_union(ace_root: Path | None = None, seed: int = 0) -> MoleculeTable:
    RDLogger.DisableLog("rdApp.*")
    sources, candidates = [NCI_SMILES], read_table(NCI_SMILES)["0"].astype(str).tolist()
    folder = moleculeace.data_folder(ace_root)
    for name in moleculeace.available(ace_root):
        frame = read_csv(folder / f"{name}.csv")
        candidates += frame.loc[frame["split"] == "train", "smiles"].astype(str).tolist()
        sources.append(folder / f"{name}.csv")
    unique = list(dict.fromkeys(canonical(s) for s in candidates))
    return MoleculeTable(
        name=f"offline-union-seed{seed}",
        smiles=unique,
        idx=np.arange(len(unique), dtype=np.int64),
        targets=np.zeros((len(unique), 0), np.float32),
        target_names=[],
        task_type="graph_regression",
        splits={k: v for k, v in seeded_split(len(unique), seed, (0.95, 0.05, 0.0)).items() if len(v)},
        source_files=sources,
    )
