"""task.target_shift / target_scale: auto → the train split's per-target mean and std.

The sharder records every split's target statistics in the manifest (format/target_stats.py);
a regression run standardises its targets with those of data.train_split unless the config gives
numbers, which win. resolve.resolve_config puts the values into the run's resolved copy of the
config (the config check and the trainer both resolve), and the run's config.resolved.yaml records
them for `gtscale evaluate` and `gtscale export`.
"""

from __future__ import annotations

from gtscale.errors import UserError
from gtscale.format.target_stats import TARGET_STATS, recorded_stats
from gtscale.train.config import TaskConfig


def resolve_target_scaling(task: TaskConfig, manifest: dict, train_split: str, num_targets: int) -> tuple[float | list[float], float | list[float]]:
    """(shift, scale) for `task`: explicit values as given (a list must have one entry per target),
    auto from the manifest's statistics of `train_split`; a target without train labels gets
    shift 0, and one without spread (std 0) scale 1."""
    where = manifest.get("_dir", "the shards")
    stats = None
    if "auto" in (task.target_shift, task.target_scale):
        stats = recorded_stats(manifest, train_split)
        if stats is None:
            raise UserError(f"task.target_shift / target_scale: auto needs the train split's target statistics (task.{TARGET_STATS}.{train_split}) "
                            f"in {where}'s manifest, which gtscale shard records; reshard, or set both to numbers")
    resolved = []
    for key, value, fallback, default in (("target_shift", task.target_shift, "mean", 0.0), ("target_scale", task.target_scale, "std", 1.0)):
        if value == "auto":
            value = [v if v is not None and (key == "target_shift" or v > 1e-12) else default for v in stats[fallback]]
        if isinstance(value, list) and len(value) != num_targets:
            raise UserError(f"task.{key}: {len(value)} values for the {num_targets} target(s) of {where}; give one per target, one number, or auto")
        resolved.append(value)
    return resolved[0], resolved[1]
