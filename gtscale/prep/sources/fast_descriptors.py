"""RDKit's 2D descriptors of one molecule with what several of them compute alike made once: the
fast form of `descriptors.reference_values` (RDKit's own functions, one call each), equal to it
value for value (tests/prep/test_descriptors.py checks every descriptor on thousands of molecules).

Called one by one, RDKit's functions repeat work:
- MaxEStateIndex, MinEStateIndex, MaxAbsEStateIndex and MinAbsEStateIndex each compute every
  atom's E-state index (an O(N²) Python loop, the priciest step after qed);
- Ipc and AvgIpc each compute the characteristic polynomial of the adjacency matrix;
- FpDensityMorgan1/2/3 each build a Morgan generator before fingerprinting;
- each of the 14 PEOE_VSA, 10 SMR_VSA and 12 SlogP_VSA bins calls its family's function for all
  of them and keeps one;
- qed computes the Crippen logP and TPSA of its hydrogen-stripped copy of the molecule, which is
  the molecule itself whenever stripping removes nothing (the copy pickles to the same bytes);
- SPS walks atoms and bonds through Python wrappers and looks each atom up in lists;
- NumValenceElectrons and NumRadicalElectrons walk the atoms through `mol.GetAtoms()`, whose
  Python wrapper costs more than the property reads;
- qed's 116 structural alerts are one substructure search per pattern from Python.

Here the shared results are computed once per molecule (`Shared`), in RDKit's own code or in the
same operations on the same values, so every descriptor is the float RDKit gives. qed's alerts are
searched in one call of an RDKit FilterCatalog, whose SMARTS matcher is the very `SubstructMatch`
that `HasSubstructMatch` calls (recursion allowed, chirality and query-query matches off). A
descriptor RDKit cannot compute raises here as it raises there (the caller's NaN); so does every
descriptor that reads a shared result that failed.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
from rdkit import Chem
from rdkit.Chem import Descriptors, Graphs, QED, Crippen, MolSurf, rdFingerprintGenerator, rdmolops
from rdkit.Chem import rdMolDescriptors as rdmd
from rdkit.Chem.EState.EState import EStateIndices
from rdkit.Chem.FilterCatalog import FilterCatalog, FilterCatalogEntry, SmartsMatcher
from rdkit.Chem.SpacialScore import _SpacialScore
from rdkit.ML.InfoTheory import entropy

_Atom = Chem.rdchem.Atom


class Shared:
    """One molecule's results that several descriptors read, each made on first use. A failure is
    kept and raised again to every reader, as each would have met it on its own."""

    def __init__(self, mol: Chem.Mol):
        self.mol = mol
        self._made: dict[str, tuple[object, Exception | None]] = {}

    def get(self, name: str, make: Callable[[Chem.Mol], object]):
        if name not in self._made:
            try:
                self._made[name] = (make(self.mol), None)
            except Exception as err:  # RDKit raises on exotic molecules: each reader raises it
                self._made[name] = (None, err)
        value, err = self._made[name]
        if err is not None:
            raise err
        return value


# --- E-state indices: RDKit's EStateIndices, once --------------------------------------------
def _estate(shared: Shared) -> np.ndarray:
    return shared.get("estate", EStateIndices)


# --- Ipc, AvgIpc: GraphDescriptors.Ipc's steps, the polynomial once --------------------------
def _characteristic_polynomial(mol: Chem.Mol) -> np.ndarray:
    """abs of the characteristic polynomial of the hydrogen-suppressed adjacency matrix, as
    GraphDescriptors.Ipc computes it (its distance matrix cached on the molecule as it caches it)."""
    try:
        distances = mol._adjMat
    except AttributeError:
        distances = Chem.GetDistanceMatrix(mol, False)
        mol._adjMat = distances
    return abs(Graphs.CharacteristicPolynomial(mol, np.equal(distances, 1)))


def _ipc(shared: Shared) -> float:
    polynomial = shared.get("polynomial", _characteristic_polynomial)
    return sum(polynomial) * entropy.InfoEntropy(polynomial)


def _avg_ipc(shared: Shared) -> float:
    return entropy.InfoEntropy(shared.get("polynomial", _characteristic_polynomial))


# --- atom sums: Descriptors.NumValenceElectrons / NumRadicalElectrons over an atom list ---------
def _atoms(mol: Chem.Mol) -> list:
    return list(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms())))


def _valence_electrons(shared: Shared) -> int:
    table = Chem.GetPeriodicTable()
    return sum(table.GetNOuterElecs(atom.GetAtomicNum()) - atom.GetFormalCharge() + atom.GetTotalNumHs()
               for atom in shared.get("atoms", _atoms))


def _radical_electrons(shared: Shared) -> int:
    return sum(map(_Atom.GetNumRadicalElectrons, shared.get("atoms", _atoms)))


# --- FpDensityMorgan1/2/3: Descriptors._FingerprintDensity with one generator per radius --------
@functools.cache
def _morgan_generator(radius: int):
    return rdFingerprintGenerator.GetMorganGenerator(radius)


def _fingerprint_density(radius: int, shared: Shared) -> float:
    mol = shared.mol
    val = len(_morgan_generator(radius).GetSparseCountFingerprint(mol).GetNonzeroElements())
    num_heavy_atoms = mol.GetNumHeavyAtoms()
    return 0.0 if num_heavy_atoms == 0 else float(val) / num_heavy_atoms


# --- qed: QED.properties, shared parts once, the alerts in one call ----------------------------
def _catalog(patterns: list[tuple[str, Chem.Mol]]) -> FilterCatalog:
    catalog = FilterCatalog()
    for name, pattern in patterns:
        catalog.AddEntry(FilterCatalogEntry(name, SmartsMatcher(name, pattern, 1)))  # matched at least once
    return catalog


@functools.cache
def _alert_catalog() -> FilterCatalog:
    return _catalog([(str(k), alert) for k, alert in enumerate(QED.StructuralAlerts)])


def _logp(shared: Shared) -> float:
    return shared.get("logp", Crippen.MolLogP)


def _tpsa(shared: Shared) -> float:
    return shared.get("tpsa", MolSurf.TPSA)


def _qed(shared: Shared) -> float:
    """QED.qed with QED.properties' values: on the hydrogen-stripped copy QED.properties makes,
    its logP and TPSA the molecule's own where the copy is the molecule, its structural alerts
    counted by one catalog call."""
    mol = Chem.RemoveHs(shared.mol)
    same = mol.ToBinary() == shared.mol.ToBinary()
    properties = QED.QEDproperties(
        MW=rdmd._CalcMolWt(mol),
        ALOGP=_logp(shared) if same else Crippen.MolLogP(mol),
        HBA=sum(len(mol.GetSubstructMatches(pattern)) for pattern in QED.Acceptors if mol.HasSubstructMatch(pattern)),
        HBD=rdmd.CalcNumHBD(mol),
        PSA=_tpsa(shared) if same else MolSurf.TPSA(mol),
        ROTB=rdmd.CalcNumRotatableBonds(mol, rdmd.NumRotatableBondsOptions.Strict),
        AROM=len(Chem.GetSSSR(Chem.DeleteSubstructs(Chem.Mol(mol), QED.AliphaticRings))),
        ALERTS=len(_alert_catalog().GetMatches(mol)),
    )
    return QED.qed(mol, qedProperties=properties)


# --- VSA bins: each family's function once ---------------------------------------------------
#: family prefix → RDKit's function giving all its bins (MolSurf installs `PREFIX<k>` as
#: `lambda x, y=k-1: FAMILY_(x, force=False)[y]`)
_VSA_FAMILIES = {"PEOE_VSA": MolSurf.PEOE_VSA_, "SMR_VSA": MolSurf.SMR_VSA_, "SlogP_VSA": MolSurf.SlogP_VSA_}


def _vsa_bin(prefix: str, index: int, shared: Shared) -> float:
    return shared.get(prefix, lambda mol: _VSA_FAMILIES[prefix](mol, force=False))[index]


def _vsa_override(name: str, fn: Callable) -> Callable[[Shared], float] | None:
    prefix = name.rstrip("0123456789")
    defaults = getattr(fn, "__defaults__", None) or ()
    if prefix in _VSA_FAMILIES and name != prefix and len(defaults) == 1 and isinstance(defaults[0], int):
        return functools.partial(_vsa_bin, prefix, defaults[0])
    return None


# --- SPS: SpacialScore.SPS's integer score, atoms and bonds read through lists --------------
def _sps(shared: Shared) -> float:
    """SpacialScore.SPS (normalised): Σ over atoms of hybridisation · stereo · ring · degree², over
    the heavy atoms; the same terms from the same RDKit calls, the sum an integer."""
    mol = Chem.Mol(shared.mol)
    rdmolops.FindPotentialStereoBonds(mol)
    stereo = {index for index, _ in Chem.FindMolChiralCenters(mol, includeUnassigned=True, includeCIP=False, useLegacyImplementation=False)}
    for bond in map(mol.GetBondWithIdx, range(mol.GetNumBonds())):
        if bond.GetBondType() == Chem.rdchem.BondType.DOUBLE and bond.GetStereo() != Chem.BondStereo.STEREONONE:
            stereo.update((bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))
    hybridisation = _SpacialScore._hybridisations
    score = 0
    for index, atom in enumerate(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms()))):
        ring = 1 if atom.GetIsAromatic() else 2 if atom.IsInRing() else 1
        score += hybridisation[atom.GetHybridization()] * (2 if index in stereo else 1) * ring * atom.GetDegree() ** 2
    return score / mol.GetNumHeavyAtoms()


_OVERRIDES: dict[str, Callable[[Shared], float]] = {
    "MaxEStateIndex": lambda shared: max(_estate(shared)),
    "MinEStateIndex": lambda shared: min(_estate(shared)),
    "MaxAbsEStateIndex": lambda shared: max(abs(x) for x in _estate(shared)),
    "MinAbsEStateIndex": lambda shared: min(abs(x) for x in _estate(shared)),
    "Ipc": _ipc,
    "AvgIpc": _avg_ipc,
    "NumValenceElectrons": _valence_electrons,
    "NumRadicalElectrons": _radical_electrons,
    "FpDensityMorgan1": functools.partial(_fingerprint_density, 1),
    "FpDensityMorgan2": functools.partial(_fingerprint_density, 2),
    "FpDensityMorgan3": functools.partial(_fingerprint_density, 3),
    "qed": _qed,
    "MolLogP": _logp,
    "TPSA": _tpsa,
    "SPS": _sps,
}


@functools.cache
def plan(names: tuple[str, ...] | None) -> tuple[Callable[[Shared], float], ...]:
    """One function of a Shared per named descriptor (default: every one of Descriptors._descList),
    in that order: the override where one exists, else RDKit's function."""
    table = dict(Descriptors._descList)
    out = []
    for name in names if names is not None else tuple(table):
        if name in _OVERRIDES:
            out.append(_OVERRIDES[name])
        elif (vsa := _vsa_override(name, table[name])) is not None:
            out.append(vsa)
        else:
            out.append(lambda shared, fn=table[name]: fn(shared.mol))
    return tuple(out)


def values(mol: Chem.Mol, names: tuple[str, ...] | None = None) -> np.ndarray:
    """float64 [D] of the named descriptors (default: every one) of the molecule, NaN where RDKit raises."""
    return nan_where_raising(plan(names), Shared(mol))


def nan_where_raising(functions, arg) -> np.ndarray:
    """float64 [len(functions)]: each function of arg, NaN where it raises."""
    out = np.full(len(functions), np.nan)
    for k, fn in enumerate(functions):
        try:
            out[k] = fn(arg)
        except Exception:  # RDKit raises on a few descriptors for exotic molecules: a missing value
            pass
    return out
