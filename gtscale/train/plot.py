"""Training loss, evaluation metrics and learning rate of a run to one PNG (`gtscale plot RUN_DIR`)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from gtscale.errors import UserError


def read_metrics(path: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """split → metric → [(step, value)], the last value per step winning (a resumed run repeats steps)."""
    series: dict = defaultdict(lambda: defaultdict(dict))
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{number}: not a JSON line ({err})") from err
        for key, value in row.items():
            if key not in ("step", "split") and isinstance(value, (int, float)):
                series[row["split"]][key][row["step"]] = value
    return {split: {k: sorted(v.items()) for k, v in metrics.items()} for split, metrics in series.items()}


#: metrics.jsonl splits that are not evaluations: training rows (their own panels) and the
#: optimizer-state sizes in bytes logged once as "memory", which on the metric axis would flatten
#: every curve to a line at zero.
NOT_EVALUATIONS = ("train", "memory")


def evaluation_curves(series: dict) -> dict[str, list[tuple[int, float]]]:
    """"<split> <metric>" → points of every evaluation metric (sample counts left out)."""
    return {
        f"{split} {name}": points
        for split, metrics in series.items() if split not in NOT_EVALUATIONS
        for name, points in metrics.items() if name != "samples"
    }


def draw(series: dict):
    """The figure: training loss, evaluation metrics, learning rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = series.get("train", {})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if "loss" in train:
        axes[0].plot(*zip(*train["loss"]), label="train loss")
    axes[0].set(title="training loss", xlabel="step")
    for label, points in evaluation_curves(series).items():
        axes[1].plot(*zip(*points), marker="o", label=label)
    axes[1].set(title="evaluation", xlabel="step")
    if "lr" in train:
        axes[2].plot(*zip(*train["lr"]))
    axes[2].set(title="learning rate", xlabel="step")
    for ax in axes[:2]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    return fig


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Draw RUN_DIR/metrics.jsonl's curves to `out` (default RUN_DIR/curves.png), atomically; its path."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path}: not found")
    fig = draw(read_metrics(path))
    out = out or run_dir / "curves.png"
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    fig.savefig(tmp, dpi=100, format="png")
    os.replace(tmp, out)  # a reader (or a crash) never sees half a PNG
    return out
