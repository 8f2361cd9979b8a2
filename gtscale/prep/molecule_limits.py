"""How large a molecule gtscale reads from a user's SMILES: the one bound on the work per molecule,
checked on the string before RDKit sees it.

Everything after parsing grows with the atom count N: RDKit's parse and sanitisation, shortest
paths (N² entries, a BFS per atom), SVD and Laplacian eigenpairs (O(N³)), a model's attention and
EGT's edge channels (N² per layer). Unchecked, a 10 MB SMILES line takes RDKit 37 s and 5 GB
before any of that starts, and a 5,000-atom chain needs minutes and gigabytes. So a SMILES is
refused, with the row's reason, when it is

- longer than CHARS_PER_ATOM characters per atom allowed (`smiles_too_long`): a valid SMILES
  spends far fewer (a bracket atom with isotope, charge and map number, a bond and a ring closure
  come to ~20), so this never refuses a molecule within the atom cap, and bounds what the atom
  count below reads;
- naming more heavy atoms than allowed (`too_many_nodes`), counted from the string.

The count is a lower bound of the atoms RDKit keeps (hydrogens may be removed, heavy atoms never
are), so a molecule refused here is one the featuriser's own atom check would have refused after
the work. The cap is the export's (its shards' `--max-nodes`), or DEFAULT_MAX_ATOMS where none was
set; `--max-nodes` overrides it.
"""

from __future__ import annotations

import re

#: Atoms a molecule may have where no --max-nodes says otherwise (`gtscale predict` of an export
#: whose shards set none, `gtscale shard smiles-csv`, the ECFP and kernel baselines): drug-like
#: molecules have well under 100 heavy atoms.
DEFAULT_MAX_ATOMS = 512
#: Characters a SMILES may spend per allowed atom (see the module docstring).
CHARS_PER_ATOM = 32

# An atom of a SMILES: a bracket atom, or an organic-subset symbol (two-letter ones first).
_ATOM = re.compile(r"\[[^\]]*\]|Br|Cl|[BCNOPSFIbcnops]")
# A bracket atom that is hydrogen ([H], [2H], [H+], not [He], [Hg] …): RDKit may remove it.
_HYDROGEN = re.compile(r"\[\d*H(?![a-z])")


def max_smiles_chars(max_atoms: int) -> int:
    return CHARS_PER_ATOM * max_atoms


def heavy_atoms(smiles: str) -> int:
    """Atoms other than hydrogen that a SMILES names (before any whitespace: RDKit reads what
    follows as the molecule's name)."""
    words = smiles.split(maxsplit=1)
    if not words:
        return 0
    return sum(1 for atom in _ATOM.findall(words[0]) if not _HYDROGEN.match(atom))


def size_reason(smiles: str, max_atoms: int) -> str | None:
    """The reject reason of a SMILES too large to featurise under a cap of `max_atoms`, else None."""
    if len(smiles) > max_smiles_chars(max_atoms):
        return "smiles_too_long"
    if heavy_atoms(smiles) > max_atoms:
        return "too_many_nodes"
    return None
