"""Dataset readers by name (`gtscale shard NAME`). Each returns a `MoleculeTable` read from the
dataset's real layout by its module in prep/sources/."""

from __future__ import annotations

from pathlib import Path

from gtscale.prep.sources.base import MoleculeTable
from gtscale.errors import UserError

#: name → what --root must point at (for help texts and errors)
DATASETS = {
    "pcqm4mv2": "folder holding pcqm4m-v2/ (raw/data.csv.gz, split_dict.pt), as OGB-LSC downloads it",
    "ogbg-molhiv": "folder holding ogbg_molhiv/ (mapping/mol.csv.gz, split/scaffold/), as OGB downloads it",
    "ogbg-molpcba": "folder holding ogbg_molpcba/ (mapping/mol.csv.gz, split/scaffold/), as OGB downloads it",
    "nci-tpsa": "bundled: RDKit's NCI first_5K molecules with TPSA (no --root needed)",
    "wehi-pains": "bundled: RDKit's WEHI molecules labelled by the PAINS filter catalog (no --root needed)",
    "moleculeace": "--dataset CHEMBL214_Ki etc.: a MoleculeACE benchmark set from the installed package (or --root FOLDER of its CSVs)",
    "moses": "MOSES's 1.9 M molecules (train, test, test_scaffolds) from the installed molsets package (or --root FOLDER of its .csv.gz), "
             "for --targets rdkit-fast or rdkit-descriptors",
    "offline-union": "the unique molecules of MoleculeACE's train splits and RDKit's NCI set, for --targets rdkit-descriptors",
    "smiles-csv": "--input FILE (.csv or .smi, optionally compressed) with --smiles-column, --target-columns",
}


def read_dataset(name: str, *, root: str | None = None, input: str | None = None, subset: str | None = None,
                 smiles_column: str = "smiles", id_column: str | None = None, target_columns: str = "",
                 task_type: str = "graph_regression", split_column: str | None = None, split_seed: int = 0,
                 targets: str = "given", workers: int = 1, progress: bool = True) -> MoleculeTable:
    """Read dataset `name` from `root` (or the file `input`, smiles-csv), with the SMILES-table
    options (`target_columns` comma-separated) and `targets` (rdkit-descriptors / rdkit-fast: the
    dataset's targets replaced by standardised RDKit descriptors, all of them or the cheap set,
    descriptors.FAST)."""
    if name in ("offline-union", "moses") and targets == "given":
        raise UserError(f"{name} has no targets of its own: add --targets rdkit-fast or --targets rdkit-descriptors")
    table = _read_source(name, root, input, subset, smiles_column, id_column, target_columns, task_type, split_column, split_seed)
    if targets in ("rdkit-descriptors", "rdkit-fast"):
        from gtscale.prep.sources.descriptors import FAST, with_descriptor_targets

        return with_descriptor_targets(table, workers=max(1, workers), progress=progress, names=FAST if targets == "rdkit-fast" else None)
    return table


def _read_source(name: str, root: str | None, input: str | None, subset: str | None, smiles_column: str, id_column: str | None,
                 target_columns: str, task_type: str, split_column: str | None, split_seed: int) -> MoleculeTable:
    # Each reader is imported when its dataset is read: the OGB one imports torch (~1.5 s of start-up).
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    if name in ("nci-tpsa", "wehi-pains"):
        from gtscale.prep.sources import bundled

        return bundled.read_nci_tpsa() if name == "nci-tpsa" else bundled.read_wehi_pains()
    if name == "moses":
        from gtscale.prep.sources import moses

        return moses.read_moses(Path(root) if root else None)
    if name == "offline-union":
        from gtscale.prep.sources import union

        return union.read_offline_union(Path(root) if root else None, seed=split_seed)
    if name == "moleculeace":
        from gtscale.prep.sources import moleculeace

        return moleculeace.read_moleculeace(subset, Path(root) if root else None, seed=split_seed)
    if name == "smiles-csv":
        from gtscale.prep.sources import smiles

        if not input:
            raise UserError("smiles-csv needs --input FILE")
        return smiles.read_smiles_table(
            Path(input),
            smiles_column=smiles_column,
            target_columns=[c for c in target_columns.split(",") if c] if target_columns else [],
            task_type=task_type,
            id_column=id_column,
            split_column=split_column,
            seed=split_seed,
        )
    if not root:
        raise UserError(f"{name} needs --root: the {DATASETS[name]}")
    folder = Path(root)
    if not folder.is_dir():
        raise UserError(f"{folder}: --root is not a directory")
    from gtscale.prep.sources import ogb

    if name == "pcqm4mv2":
        return ogb.read_pcqm4mv2(folder)
    return ogb.read_ogbg_mol(folder, name)
