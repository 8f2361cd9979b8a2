"""Molecule-level features as pretraining targets (task.aux_graph_feat).

A shard folder written with `gtscale shard --graph-features` holds one vector per molecule
(graph_feat: Morgan bits or log counts, RDKit 2D descriptors as z-scores, in the generators' order). As
inputs they feed the task head; as targets they teach a backbone what a fingerprint SVR and a
descriptor model see: which radius-2 environments a molecule has, and its global properties
(CheMeleon, Burns et al. 2025, pretrains on descriptors the same way). Each generator's block gets
the loss that suits its values, and the blocks count equally:

    L = mean over graphs of  mean over blocks b of  ℓ_b(ŝ_b, f_b)
    ℓ_bits    = mean over bits of BCE-with-logits       (morgan2048)
    ℓ_zscores = mean over descriptors of squared error  (rdkit2d; morgan2048counts' log counts alike)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gtscale.errors import UserError
from gtscale.format import schema


#: A Morgan generator → its loss: bits by BCE, log counts by squared error.
MORGAN_LOSSES = {"morgan2048": "bce", "morgan2048counts": "mse"}


@dataclass(frozen=True)
class FeatureTargets:
    """The blocks of graph_feat: (start, stop, loss) with loss "bce" (bits) or "mse" (z-scores)."""

    blocks: tuple[tuple[int, int, str], ...]

    @property
    def dim(self) -> int:
        return self.blocks[-1][1]

    @classmethod
    def from_manifest(cls, manifest: dict, where: str) -> "FeatureTargets":
        """The blocks of the manifest's features.graph; a UserError naming `where` when the
        shards hold no molecule-level features or ones this reader does not know."""
        entry = manifest.get("features", {}).get("graph")
        if not entry:
            raise UserError(f"task.aux_graph_feat: {where} holds no molecule-level features to predict "
                            "(shard with --graph-features morgan2048 and/or rdkit2d)")
        blocks, start = [], 0
        for name in entry.get("generators", []):
            if name == "rdkit2d":
                width, loss = len(entry.get("rdkit2d", {}).get("names", [])), "mse"
            elif name in MORGAN_LOSSES:
                width, loss = schema.MORGAN_BITS, MORGAN_LOSSES[name]
            else:
                raise UserError(f"task.aux_graph_feat: {where}: unknown molecule-level feature generator {name!r}")
            blocks.append((start, start + width, loss))
            start += width
        if not blocks or start != int(entry.get("dim", -1)):
            raise UserError(f"task.aux_graph_feat: {where}: features.graph's generators make {start} values, its dim says {entry.get('dim')}")
        return cls(tuple(blocks))

    def loss(self, scores: torch.Tensor, features: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Mean loss over the real graphs (`real` [B] bool; filler graphs excluded) of scores [B, G]
        against the features [B, G]; 0 (with a graph to the scores) when no graph is real."""
        scores, features = scores.float(), features.float()
        per_graph = torch.zeros(scores.shape[0], device=scores.device)
        for start, stop, kind in self.blocks:
            s, f = scores[:, start:stop], features[:, start:stop]
            block = F.binary_cross_entropy_with_logits(s, f, reduction="none") if kind == "bce" else (s - f) ** 2
            per_graph = per_graph + block.mean(dim=1)
        weight = real.to(per_graph.dtype)
        return (per_graph / len(self.blocks) * weight).sum() / weight.sum().clamp(min=1.0)
