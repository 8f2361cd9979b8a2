"""Molecule-level input features (`gtscale shard … --graph-features morgan2048,rdkit2d`), chemprop's
extra features: one vector per molecule (record key graph_feat), which the task head reads beside
the pooled graph representation.

Generators, concatenated in the order given:
- morgan2048: Morgan fingerprint bits, radius 2, 2048 bits (ECFP4, the MoleculeACE SVR's input);
- morgan2048counts: the same 2048 hashed environments counted, as log(1 + count): how often an
  environment occurs, which bits drop, on the scale of bits (1 → 0.69, 2 → 1.10, 10 → 2.40);
- rdkit2d: every descriptor of RDKit's `Descriptors._descList` (217 in RDKit 2026.09), standardised
  with the train split's mean and standard deviation (`fit`), clipped to ±CLIP; a value RDKit
  cannot compute becomes 0 (the train mean), a column constant on train keeps std 1.

Standardised at write time, with statistics computed from the train split before any shard is
written and recorded in the manifest (features.graph): the records hold the values the model
reads, so the loader needs no statistics, the values fit float16 (raw descriptors such as Ipc do
not), and `gtscale predict` applies the same recorded statistics to new molecules through this
same function (`compute`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.prep.sources.descriptors import CLIP, compute_descriptors, descriptor_values, descriptor_names

MORGAN_BITS = schema.MORGAN_BITS
#: generator name (schema.GRAPH_FEATURE_GENERATORS, in that order) → feature width
GENERATORS = dict(zip(schema.GRAPH_FEATURE_GENERATORS, (MORGAN_BITS, MORGAN_BITS, len(descriptor_names())), strict=True))


@dataclass(frozen=True)
class GraphFeatures:
    """Which generators, in order, and rdkit2d's train statistics (tuples: hashable, fingerprinted)."""

    generators: tuple[str, ...]
    mean: tuple[float, ...] = ()  # rdkit2d: per-descriptor train mean
    std: tuple[float, ...] = ()  # rdkit2d: per-descriptor train std (1 where constant)

    @property
    def dim(self) -> int:
        return sum(GENERATORS[g] for g in self.generators)

    def manifest(self) -> dict:
        """manifest features.graph: enough to compute the same vector for a new molecule."""
        entry = {"generators": list(self.generators), "dim": self.dim}
        if "rdkit2d" in self.generators:
            entry["rdkit2d"] = {"names": descriptor_names(), "mean": list(self.mean), "std": list(self.std)}
        return entry

    @classmethod
    def from_manifest(cls, entry: dict | None, where: str) -> "GraphFeatures | None":
        if not entry:
            return None
        generators = tuple(entry["generators"])
        if "rdkit2d" not in generators:
            features = cls(generators)
        else:
            stats = entry["rdkit2d"]
            if stats["names"] != descriptor_names():
                raise UserError(f"{where}: rdkit2d features were computed with another RDKit descriptor set ({len(stats['names'])} "
                                f"descriptors, this RDKit has {len(descriptor_names())}); re-shard with this RDKit")
            features = cls(generators, tuple(stats["mean"]), tuple(stats["std"]))
        if entry.get("dim", features.dim) != features.dim:  # the width the model's head was built for
            raise UserError(f"{where}: features.graph.dim {entry['dim']} is not the width of generators {', '.join(generators)} ({features.dim})")
        return features


def parse_generators(text: str) -> tuple[str, ...]:
    """--graph-features value → generator names; an error naming an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in GENERATORS]
    if unknown or not names or len(set(names)) != len(names):
        raise UserError(f"--graph-features: {unknown[0] if unknown else text!r} is not a list of distinct generators "
                        f"(choose from {', '.join(GENERATORS)})")
    return names


def fit(generators: tuple[str, ...], train_smiles: list[str], workers: int = 1, progress: bool = True) -> GraphFeatures:
    """The generators with rdkit2d's statistics from the train split's molecules."""
    if "rdkit2d" not in generators:
        return GraphFeatures(generators)
    values = compute_descriptors(train_smiles, workers, progress)
    labelled = np.isfinite(values).sum(axis=0)
    with np.errstate(invalid="ignore"):
        mean = np.where(labelled > 0, np.nanmean(np.where(labelled > 0, values, 0.0), axis=0), 0.0)
        std = np.where(labelled > 1, np.nanstd(np.where(labelled > 0, values, 0.0), axis=0), 1.0)
    std = np.where(std > 1e-12, std, 1.0)
    return GraphFeatures(generators, tuple(mean.tolist()), tuple(std.tolist()))


_MORGAN = None


def _morgan() -> rdFingerprintGenerator.FingerprintGenerator64:
    """The radius-2, 2048-bit Morgan generator, built once per process."""
    global _MORGAN
    if _MORGAN is None:
        _MORGAN = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=MORGAN_BITS)
    return _MORGAN


def compute(mol: Chem.Mol, spec: GraphFeatures) -> np.ndarray:
    """graph_feat of one molecule: float16 [spec.dim] (schema.GRAPH_FEAT)."""
    parts = []
    for generator in spec.generators:
        if generator == "morgan2048":
            bits = np.zeros(MORGAN_BITS, np.float64)
            DataStructs.ConvertToNumpyArray(_morgan().GetFingerprint(mol), bits)
            parts.append(bits)
        elif generator == "morgan2048counts":
            parts.append(np.log1p(_morgan().GetCountFingerprintAsNumPy(mol).astype(np.float64)))
        else:
            z = (descriptor_values(mol) - np.asarray(spec.mean)) / np.asarray(spec.std)
            parts.append(np.clip(np.nan_to_num(z, nan=0.0, posinf=CLIP, neginf=-CLIP), -CLIP, CLIP))
    return np.concatenate(parts).astype(schema.GRAPH_FEAT_DTYPE)


def train_smiles(smiles: list[str], splits: dict[str, np.ndarray]) -> list[str]:
    """The molecules the statistics come from: the train split, or every row without one."""
    rows = splits["train"] if "train" in splits else np.arange(len(smiles))
    return [smiles[r] for r in rows]

