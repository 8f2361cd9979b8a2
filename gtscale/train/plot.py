"""`gtscale plot RUN_DIR`: training loss, evaluation metrics and learning rate to one PNG."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from gtscale.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")


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


def run(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(args.run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path}: not found")
    series = read_metrics(path)
    train = series.get("train", {})
    evals = {split: m for split, m in series.items() if split != "train"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if "loss" in train:
        axes[0].plot(*zip(*train["loss"]), label="train loss")
    axes[0].set(title="training loss", xlabel="step")
    for split, metrics in evals.items():
        for name, points in metrics.items():
            if name != "samples":
                axes[1].plot(*zip(*points), marker="o", label=f"{split} {name}")
    axes[1].set(title="evaluation", xlabel="step")
    if "lr" in train:
        axes[2].plot(*zip(*train["lr"]))
    axes[2].set(title="learning rate", xlabel="step")
    for ax in axes[:2]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    out = Path(args.out) if args.out else run_dir / "curves.png"
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")
    return 0
