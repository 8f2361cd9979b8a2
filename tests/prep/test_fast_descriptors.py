"""fast_descriptors.py: RDKit's 2D descriptors with what several share computed once are RDKit's own
floats, value for value (NaN where RDKit raises), for molecules of every kind; each shared result
is computed once per molecule; and graph features computed from the parse the graph came from are
those of a fresh parse."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem

from gtscale.prep import graph_features
from gtscale.prep.graph_features import GraphFeatures
from gtscale.prep.sources import fast_descriptors
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.sources.base import read_csv
from gtscale.prep.sources.descriptors import descriptor_names, descriptor_values, reference_values
from gtscale.prep.sources.moses import data_folder
from gtscale.prep.writer import ShardOptions, featurize_rows

#: Molecules at the edges of what the descriptors handle: ions and salts, isotopes, radicals, metals,
#: a lone atom, H2, stereo, hypervalent and charge-separated groups, dummy atoms, cages, large rings.
EDGE_SMILES = [
    "C", "[H][H]", "[2H]C([2H])([2H])[2H]", "[Na+].[Cl-]", "[NH4+]", "C[CH2]", "C[C]", "[Fe+2]", "[U]", "[H+]", "[He]",
    "c1ccccc1", "C1=CC=CC=C1", "F/C=C/F", "F/C=C\\F", "C[C@H](N)C(=O)O", "C[C@@H]1CC[C@H](C)CC1", "OCl(=O)(=O)=O",
    "[O-][N+](=O)c1ccccc1", "B(O)(O)c1ccccc1", "C[Si](C)(C)C", "OP(=O)(O)O", "NS(=O)(=O)c1ccc(N)cc1", "C1CC2CCC1C2",
    "*C", "*c1ccccc1*", "ClC[Hg]Cl", "O=C1NC(=O)NC(=O)C1", "N#N", "[C-]#[O+]", "c1ccc2c(c1)[nH]c1ccccc12",
    "C12C3C4C1C5C2C3C45", "C1CCCCCCCCCCCCCCCCCCCCCCCCCCCCC1", "[Cu+2].[O-]S(=O)(=O)[O-]", "C=C=C=C", "CC#CC#CC#C",
    "O=[N+]([O-])[O-]", "[Cl-].[Cl-].[Ca+2]", "C[N+](C)(C)C", "c1cc[nH]c1", "c1ccsc1", "FC(F)(F)C(F)(F)F", "I/C=C/I",
    "CC(=O)O[C@@H]1C[C@@H]2CC[C@@H]1C2", "N=[N+]=[N-]", "[Se]=C=[Se]", "O", "[OH-]", "C1CC1", "CCCCCCCCCCCCCCCCCCCCCC",
]


def _molecules(smiles: list[str]) -> list[Chem.Mol]:
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    return [m for m in mols if m is not None]


def _assert_equal(smiles: list[str], with_hydrogens: bool = False):
    for mol in _molecules(smiles):
        if with_hydrogens:
            mol = Chem.AddHs(mol)  # qed's stripped copy is then not the molecule itself
        name = Chem.MolToSmiles(mol)
        # a copy for each: RDKit caches some results on the molecule
        expected = reference_values(Chem.Mol(mol))
        got = descriptor_values(Chem.Mol(mol))
        differ = [descriptor_names()[k] for k in np.flatnonzero(~((expected == got) | (np.isnan(expected) & np.isnan(got))))]
        assert not differ, f"{name}: {differ}"


def test_every_descriptor_is_rdkits_own_float_on_edge_cases():
    _assert_equal(EDGE_SMILES)
    _assert_equal(EDGE_SMILES, with_hydrogens=True)


def test_every_descriptor_is_rdkits_own_float_on_nci_molecules():
    _assert_equal(read_nci_tpsa().smiles[:150])


@pytest.mark.slow
def test_every_descriptor_is_rdkits_own_float_on_two_thousand_molecules():
    """Every fourth molecule of the NCI set (about 1,250) and 500 MOSES molecules (drug-like), with
    and without explicit hydrogens: about 8 ms a molecule for RDKit's own values."""
    nci = read_nci_tpsa().smiles
    _assert_equal(nci[::4])
    _assert_equal(nci[1:300:2], with_hydrogens=True)
    _assert_equal(read_csv(data_folder() / "test.csv.gz")["SMILES"][:500].tolist())


def test_a_subset_of_descriptors_in_any_order():
    names = ("MinEStateIndex", "fr_benzene", "PEOE_VSA3", "AvgIpc", "qed", "MolLogP", "SMR_VSA10", "Ipc")
    for mol in _molecules(["CC(=O)Nc1ccc(O)cc1", "[Na+].[Cl-]", "C"]):
        np.testing.assert_array_equal(descriptor_values(Chem.Mol(mol), names), reference_values(Chem.Mol(mol), names))


def test_each_shared_result_is_computed_once_per_molecule(monkeypatch):
    calls = {"estate": 0, "polynomial": 0, "peoe": 0}

    def counted(key, fn):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(fast_descriptors, "EStateIndices", counted("estate", fast_descriptors.EStateIndices))
    monkeypatch.setattr(fast_descriptors, "_characteristic_polynomial", counted("polynomial", fast_descriptors._characteristic_polynomial))
    monkeypatch.setitem(fast_descriptors._VSA_FAMILIES, "PEOE_VSA", counted("peoe", fast_descriptors._VSA_FAMILIES["PEOE_VSA"]))
    mols = _molecules(["CC(=O)Nc1ccc(O)cc1", "c1ccccc1", "CCN"])
    for mol in mols:
        descriptor_values(mol)
    # four E-state descriptors, Ipc and AvgIpc, 14 PEOE_VSA bins: one computation each per molecule
    assert calls == {"estate": len(mols), "polynomial": len(mols), "peoe": len(mols)}


def test_graph_features_from_the_graphs_parse_are_those_of_a_fresh_parse():
    """featurize_rows computes graph_feat on the molecule it parsed for the graph (after featurising
    it, before its key): the vector a fresh parse of the SMILES gives."""
    smiles = [s for s in EDGE_SMILES if Chem.MolFromSmiles(s) is not None] + read_nci_tpsa().smiles[:40]
    train = smiles[::2]
    spec = graph_features.fit(("morgan2048", "rdkit2d"), train, progress=False)
    assert isinstance(spec, GraphFeatures)
    options = ShardOptions(graph_features=spec)
    for with_keys in (True, False):
        graphs, keys, rejects = featurize_rows(smiles, np.arange(len(smiles)), np.zeros((len(smiles), 0), np.float32), None, options,
                                               with_keys=with_keys)
        assert all((key is not None) == with_keys for key in keys)
        for graph in graphs:
            fresh = graph_features.compute(Chem.MolFromSmiles(smiles[graph["meta"]["idx"]]), spec)
            np.testing.assert_array_equal(graph["graph_feat"], fresh)
