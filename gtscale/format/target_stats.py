"""Per-target statistics of each split, recorded by the sharder in the manifest.

    manifest["task"]["target_stats"] = {split: {"count": [T], "mean": [T], "std": [T]}}

over each split's labelled (finite) target values of the records planned for it (before the
featurizer's few rejects), for regression shards (graph_regression). Training standardises regression targets with the train split's mean
and std by default (task.target_shift / target_scale: auto), as chemprop does, so that nobody
types a set's statistics by hand. std is the population std (ddof 0, chemprop's StandardScaler);
mean and std are null where a split has no label of that target (hidden test labels).
"""

from __future__ import annotations

import numpy as np

from gtscale.format.manifest import split_parts

#: The manifest key, under "task".
TARGET_STATS = "target_stats"


def split_target_stats(targets_of: dict[str, np.ndarray]) -> dict[str, dict[str, list]]:
    """{split: {count, mean, std}} of each split's targets [n, T] (NaN, inf: not counted)."""
    out = {}
    for split, targets in targets_of.items():
        values = np.asarray(targets, dtype=np.float64)
        labelled = np.isfinite(values)  # an inf target (a bad row) would make every statistic inf
        count = labelled.sum(axis=0)
        filled = np.where(labelled, values, 0.0)
        mean = filled.sum(axis=0) / np.maximum(count, 1)
        std = np.sqrt((np.where(labelled, values - mean, 0.0) ** 2).sum(axis=0) / np.maximum(count, 1))
        out[split] = {
            "count": [int(c) for c in count],
            "mean": [float(m) if c else None for m, c in zip(mean, count)],
            "std": [float(s) if c else None for s, c in zip(std, count)],
        }
    return out


def recorded_stats(manifest: dict, split: str) -> dict[str, list] | None:
    """The manifest's statistics of `split`, or None when it has none (shards written before gtscale
    recorded them, or a graph store). A union of splits ("train+valid") gets its parts' pooled:
    the counts summed, the count-weighted mean, and the population std of all their values."""
    recorded = manifest.get("task", {}).get(TARGET_STATS, {})
    parts = [recorded.get(part) for part in split_parts(split)]
    if any(p is None for p in parts):
        return None
    return parts[0] if len(parts) == 1 else pooled_stats(parts)


def pooled_stats(parts: list[dict[str, list]]) -> dict[str, list]:
    """{count, mean, std} of the union of the splits whose statistics are `parts` (a split without a
    label of a target adds nothing to it)."""
    count = np.array([p["count"] for p in parts], dtype=np.float64)  # [parts, T]
    mean = np.array([[m if m is not None else 0.0 for m in p["mean"]] for p in parts])
    std = np.array([[s if s is not None else 0.0 for s in p["std"]] for p in parts])
    total = count.sum(axis=0)
    pooled_mean = (count * mean).sum(axis=0) / np.maximum(total, 1)
    # each part's sum of squares about the pooled mean: n (σ² + (μ − μ_pooled)²)
    pooled_var = (count * (std ** 2 + (mean - pooled_mean) ** 2)).sum(axis=0) / np.maximum(total, 1)
    return {"count": [int(c) for c in total],
            "mean": [float(m) if c else None for m, c in zip(pooled_mean, total)],
            "std": [float(np.sqrt(v)) if c else None for v, c in zip(pooled_var, total)]}
