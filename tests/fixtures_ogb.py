"""Build dataset folders in exactly the on-disk layouts OGB and OGB-LSC download, from real
molecules that RDKit ships, so the real readers run on them in tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gtscale.prep.sources.bundled import NCI_SMILES, NCI_TPSA


def nci_rows(count: int, start: int = 0) -> tuple[list[str], np.ndarray]:
    """`count` NCI SMILES with their TPSA values (a real molecular property)."""
    smiles = [line.split()[0] for line in NCI_SMILES.read_text().splitlines()][start : start + count]
    tpsa = pd.read_csv(NCI_TPSA, header=None, skiprows=1, names=["smiles", "tpsa"])["tpsa"].to_numpy()[start : start + count]
    return smiles, tpsa.astype(np.float64)


def write_pcqm4mv2(root: Path, count: int = 120, extra_smiles: list[str] = ()) -> Path:
    """<root>/pcqm4m-v2/raw/data.csv.gz and split_dict.pt (numpy index arrays, as OGB-LSC ships)."""
    smiles, gap = nci_rows(count)
    smiles = smiles + list(extra_smiles)
    gap = np.concatenate([gap / 20.0, np.full(len(extra_smiles), 3.0)])
    n = len(smiles)
    order = np.random.default_rng(1).permutation(n)
    splits = {"train": order[: n // 2], "valid": order[n // 2 : 3 * n // 4], "test-dev": order[3 * n // 4 : 7 * n // 8], "test-challenge": order[7 * n // 8 :]}
    gap[np.concatenate([splits["test-dev"], splits["test-challenge"]])] = np.nan  # hidden test labels
    folder = root / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True)
    pd.DataFrame({"idx": np.arange(n), "smiles": smiles, "homolumogap": gap}).to_csv(folder / "raw" / "data.csv.gz", index=False)
    torch.save({k: np.sort(v).astype(np.int64) for k, v in splits.items()}, folder / "split_dict.pt")
    return root


def write_ogbg_mol(root: Path, name: str, count: int = 90, num_tasks: int = 1, missing_fraction: float = 0.0) -> Path:
    """<root>/ogbg_<name>/mapping/mol.csv.gz (task columns, smiles, mol_id) + split/scaffold/*.csv.gz."""
    smiles, tpsa = nci_rows(count, start=500)
    rng = np.random.default_rng(2)
    labels = (tpsa[:, None] > np.linspace(30, 90, num_tasks)[None, :]).astype(np.float64)
    labels[rng.random(labels.shape) < missing_fraction] = np.nan
    columns = ["HIV_active"] if num_tasks == 1 else [f"PCBA-{1000 + t}" for t in range(num_tasks)]
    frame = pd.DataFrame(labels, columns=columns)
    frame["smiles"] = smiles
    frame["mol_id"] = [f"mol{i}" for i in range(count)]
    folder = root / name.replace("-", "_")
    (folder / "mapping").mkdir(parents=True)
    frame.to_csv(folder / "mapping" / "mol.csv.gz", index=False)
    (folder / "split" / "scaffold").mkdir(parents=True)
    order = rng.permutation(count)
    parts = {"train": order[: int(0.8 * count)], "valid": order[int(0.8 * count) : int(0.9 * count)], "test": order[int(0.9 * count) :]}
    for split, rows in parts.items():
        pd.DataFrame(np.sort(rows)).to_csv(folder / "split" / "scaffold" / f"{split}.csv.gz", index=False, header=False)
    return root
