"""Molecules → OGB's categorical graph features, identical to `ogb.utils.smiles2graph`.

OGB's reference converts every atom property through `str()` of an RDKit enum and `list.index`
on a Python list, nine calls deep per atom. Here each feature is one dict lookup, the dicts built
once from OGB's own `allowable_features` (so the two cannot drift apart); properties are read with
`map` over unbound RDKit methods, and each array is built by a single numpy call. Output arrays use the record dtypes of schema.py.
"""

from __future__ import annotations

import hashlib

import numpy as np
from ogb.utils.features import allowable_features
from rdkit import Chem, RDLogger

from gtscale.format import schema


class FeaturizeError(ValueError):
    """A molecule that cannot become a graph; `reason` is the rejects-file category."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _enum_map(enum, allowed: list, strict: bool = False) -> dict:
    """RDKit enum value → position of str(value) in OGB's list; OGB's 'misc' slot (last) if absent.

    strict: OGB uses list.index without a misc slot (bond stereo); absent values are left out of
    the map and rejected, because smiles2graph raises on them too."""
    out = {}
    for value in enum.values.values():
        if str(value) in allowed:
            out[value] = allowed.index(str(value))
        elif not strict:
            out[value] = len(allowed) - 1
    return out


class _IntMap(dict):
    """Integer property → position in OGB's list, 'misc' (last slot) for anything else."""

    def __init__(self, allowed: list):
        super().__init__((v, i) for i, v in enumerate(allowed) if v != "misc")
        self.misc = len(allowed) - 1

    def __missing__(self, value: int) -> int:
        return self.misc


_F = allowable_features
_ATOMIC_NUM = _IntMap(_F["possible_atomic_num_list"])
_DEGREE = _IntMap(_F["possible_degree_list"])
_CHARGE = _IntMap(_F["possible_formal_charge_list"])
_NUM_H = _IntMap(_F["possible_numH_list"])
_RADICAL = _IntMap(_F["possible_number_radical_e_list"])
_CHIRALITY = _enum_map(Chem.ChiralType, _F["possible_chirality_list"])
_HYBRIDIZATION = _enum_map(Chem.HybridizationType, _F["possible_hybridization_list"])
_BOND_TYPE = _enum_map(Chem.BondType, _F["possible_bond_type_list"])
_BOND_STEREO = _enum_map(Chem.BondStereo, _F["possible_bond_stereo_list"], strict=True)

_UNSPECIFIED_CHIRALITY = _CHIRALITY[Chem.ChiralType.CHI_UNSPECIFIED]
_STEREO_NONE = _BOND_STEREO[Chem.BondStereo.STEREONONE]
# Bond order (Bond.GetBondTypeAsDouble) → OGB bond type; 'misc' for any other order.
_BOND_ORDER = {"SINGLE": 1.0, "DOUBLE": 2.0, "TRIPLE": 3.0, "AROMATIC": 1.5}
_BOND_TYPE_BY_ORDER = _IntMap([_BOND_ORDER[name] for name in _F["possible_bond_type_list"][:-1]] + ["misc"])

# Unbound RDKit methods: map(Atom.GetAtomicNum, atoms) avoids a Python frame per atom.
_Atom, _Bond = Chem.rdchem.Atom, Chem.rdchem.Bond


def parse_smiles(smiles: str) -> Chem.Mol:
    """RDKit molecule from SMILES with RDKit's log silenced; FeaturizeError when it fails."""
    if not smiles or not smiles.strip():
        raise FeaturizeError("empty_smiles")
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise FeaturizeError("invalid_smiles", smiles[:80])
    if mol.GetNumAtoms() == 0:
        raise FeaturizeError("empty_molecule", smiles[:80])
    return mol


def featurize_mol(mol: Chem.Mol, has_chirality: bool = True, may_have_bond_stereo: bool = True, may_have_dative_bonds: bool = True) -> dict[str, np.ndarray]:
    """{node_feat uint8 [N, 9], edge_index int16/int32 [2, E], edge_feat uint8 [E, 3]}: smiles2graph's
    x, edge_index and edge_attr.

    The flags let a caller that knows the SMILES skip reads whose answer is fixed: no chiral tags
    without '@', no double-bond stereo without '/' or '\\', no dative bonds without '->', '<-' or a
    bracket atom (see featurize_smiles). No such promise holds for charges: sanitization turns hypervalent
    organic-subset atoms, e.g. OCl(=O)(=O)=O, into charge-separated form."""
    # GetAtomWithIdx directly: mol.GetAtoms() iterates through a Python-level wrapper in
    # rdkit.Chem that costs more than all the property reads together.
    n = mol.GetNumAtoms()
    atoms = list(map(mol.GetAtomWithIdx, range(n)))
    columns = [
        [_ATOMIC_NUM[v] for v in map(_Atom.GetAtomicNum, atoms)],
        [_CHIRALITY[v] for v in map(_Atom.GetChiralTag, atoms)] if has_chirality else [_UNSPECIFIED_CHIRALITY] * n,
        [_DEGREE[v] for v in map(_Atom.GetTotalDegree, atoms)],
        [_CHARGE[v] for v in map(_Atom.GetFormalCharge, atoms)],
        [_NUM_H[v] for v in map(_Atom.GetTotalNumHs, atoms)],
        [_RADICAL[v] for v in map(_Atom.GetNumRadicalElectrons, atoms)],
        [_HYBRIDIZATION[v] for v in map(_Atom.GetHybridization, atoms)],
        list(map(_Atom.GetIsAromatic, atoms)),
        list(map(_Atom.IsInRing, atoms)),
    ]
    x = np.array(columns, dtype=np.uint8).T.copy()

    bonds = list(map(mol.GetBondWithIdx, range(mol.GetNumBonds())))
    index_dtype = schema.index_dtype(n)
    if not bonds:
        return {
            schema.NODE_FEAT: x,
            schema.EDGE_INDEX: np.zeros((2, 0), dtype=index_dtype),
            schema.EDGE_FEAT: np.zeros((0, len(schema.BOND_FEATURE_DIMS)), dtype=np.uint8),
        }
    if may_have_bond_stereo:
        try:
            stereo = [_BOND_STEREO[v] for v in map(_Bond.GetStereo, bonds)]
        except KeyError as err:
            raise FeaturizeError("unsupported_bond_stereo", str(err.args[0])) from None
    else:
        stereo = [_STEREO_NONE] * len(bonds)
    if may_have_dative_bonds:
        bond_types = [_BOND_TYPE[v] for v in map(_Bond.GetBondType, bonds)]
    else:  # a float per bond is cheaper than an RDKit enum; unambiguous without dative bonds
        bond_types = [_BOND_TYPE_BY_ORDER[v] for v in map(_Bond.GetBondTypeAsDouble, bonds)]
    bond_feat = np.array(
        [
            bond_types,
            stereo,
            list(map(_Bond.GetIsConjugated, bonds)),
        ],
        dtype=np.uint8,
    ).T
    ends = np.array([list(map(_Bond.GetBeginAtomIdx, bonds)), list(map(_Bond.GetEndAtomIdx, bonds))], dtype=index_dtype)
    # smiles2graph lists each bond as (i→j) then (j→i), bonds in RDKit order.
    edge_index = np.empty((2, 2 * len(bonds)), dtype=index_dtype)
    edge_index[:, 0::2] = ends
    edge_index[:, 1::2] = ends[::-1]
    return {schema.NODE_FEAT: x, schema.EDGE_INDEX: edge_index, schema.EDGE_FEAT: np.repeat(bond_feat, 2, axis=0)}


def featurize_smiles(smiles: str) -> dict[str, np.ndarray]:
    return featurize_parsed(parse_smiles(smiles), smiles)


def molecule_key(mol: Chem.Mol) -> str:
    """64-bit hash of the canonical SMILES: equal for two spellings of one molecule."""
    return hashlib.blake2b(Chem.MolToSmiles(mol).encode(), digest_size=8).hexdigest()


def featurize_parsed(mol: Chem.Mol, smiles: str) -> dict[str, np.ndarray]:
    """The graph of `mol`, parsed from `smiles` (parse_smiles): one parse serves the graph, the
    molecule-level features and the molecule key."""
    # What SMILES syntax alone decides: tetrahedral (and atropisomeric) stereo is only written with
    # '@', double-bond stereo only with '/' or '\\'; dative bonds are written '->' / '<-', or made by
    # sanitization from bonds to metals, which are always bracket atoms.
    # tests/prep/test_featurize.py checks the result against smiles2graph on ~15k molecules.
    return featurize_mol(
        mol,
        has_chirality="@" in smiles,
        may_have_bond_stereo="/" in smiles or "\\" in smiles or "@" in smiles,
        may_have_dative_bonds=">" in smiles or "<" in smiles or "[" in smiles,
    )


RDLogger.DisableLog("rdApp.*")  # invalid SMILES are counted in the manifest, not printed
