"""The bound on the work per molecule: a SMILES too large is refused from the string alone, and the
string's atom count never refuses a molecule that the featuriser's own check would keep."""

import numpy as np
from rdkit import Chem

from gtscale.format import schema
from gtscale.prep.molecule_limits import CHARS_PER_ATOM, heavy_atoms, size_reason
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.writer import ShardOptions, featurize_rows
from gtscale.prep.structure import StructureOptions


def nci_molecules() -> list[tuple[str, Chem.Mol]]:
    """The bundled NCI molecules that RDKit reads, with their parse."""
    parsed = [(s, Chem.MolFromSmiles(s)) for s in read_nci_tpsa().smiles]
    return [(s, mol) for s, mol in parsed if mol is not None]


def test_the_string_count_is_rdkits_heavy_atom_count():
    molecules = nci_molecules()
    assert len(molecules) > 1000
    assert [heavy_atoms(s) for s, _ in molecules] == [sum(a.GetAtomicNum() != 1 for a in mol.GetAtoms()) for _, mol in molecules]
    # bracket atoms, two-letter symbols, hydrogens RDKit may remove, a name after the SMILES
    for s, heavy in [("[NH4+].[Cl-]", 2), ("BrCCl", 3), ("[H]C([H])([H])[2H]", 1), ("[Hg]CC", 3), ("c1ccncc1 pyridine", 6),
                     ("[13CH3:7][O-]", 2), ("", 0), ("   ", 0)]:
        assert heavy_atoms(s) == heavy, s


def test_a_molecule_within_the_cap_is_never_refused():
    for s, mol in nci_molecules():
        atoms = mol.GetNumAtoms()
        assert len(s) <= CHARS_PER_ATOM * atoms, s
        assert size_reason(s, atoms) is None, s


def test_too_long_and_too_many_atoms():
    assert size_reason("C" * 10_000_000, 512) == "smiles_too_long"  # 10 MB: never reaches RDKit
    assert size_reason("C" * (CHARS_PER_ATOM * 512 + 1), 10**6) is None  # the length cap grows with the atom cap
    assert size_reason("C" * 513, 512) == "too_many_nodes" and size_reason("C" * 512, 512) is None
    assert size_reason("[Na+]." * 600, 512) == "too_many_nodes"


def test_the_sharder_rejects_before_parsing_exactly_the_molecules_it_rejected_after():
    """featurize_rows' cheap check refuses the same molecules as the atom count of the parsed graph."""
    smiles = [s for s, _ in nci_molecules()[:400]]
    options = ShardOptions(structure=StructureOptions(spd=False, degree=False, svd_rank=0, lap_k=0), max_nodes=12)
    rows = np.arange(len(smiles))
    graphs, _, rejects = featurize_rows(smiles, rows, np.zeros((len(smiles), 0), np.float32), None, options)
    kept = {g[schema.META]["idx"] for g in graphs}
    assert kept == {i for i, s in enumerate(smiles) if Chem.MolFromSmiles(s).GetNumAtoms() <= 12}
    assert 0 < len(rejects) < len(smiles) and {reason for _, reason in rejects} == {"too_many_nodes"}
