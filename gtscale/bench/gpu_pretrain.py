"""launch/gpu-pretrain's arithmetic and report: how many steps make P passes over MOSES's train
split, and what the run did, from the files its steps wrote.

    python -m gtscale.bench.gpu_pretrain steps --shards DIR --node-budget N --passes P
    python -m gtscale.bench.gpu_pretrain summary --work DIR --shards DIR --out DIR --seconds S

`summary` writes summary.md into --out (the steps and their seconds, the corpus that was sharded,
the training run's steps, passes, throughput and final test MAE, the export and its size), prints
it, and exits 1 when a step did not pass.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from gtscale.bench.gpu_speed import read_steps
from gtscale.bench.report import write_markdown

#: Padded node slots per MOSES molecule under node-budget batching: pretrain-moses.yaml's CPU run
#: (docs/moses.md) took 2,400 steps of 2,048 slots for one pass over 200,000 molecules, ~93 a step.
SLOTS_PER_MOLECULE = 22


def pass_steps(shards: Path, node_budget: int, passes: float) -> int:
    """Optimizer steps that cover `passes` passes over the train split of a sharded corpus (a little
    more rather than less: the run's `epoch` metric says how many passes it completed)."""
    samples = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    return max(1, math.ceil(passes * samples * SLOTS_PER_MOLECULE / node_budget))


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def training_lines(run: Path) -> list[str]:
    rows = _rows(run)
    train = [r for r in rows if r.get("split") == "train"]
    if not train:
        return ["No training step was logged."]
    last = train[-1]
    rate = statistics.median(r["graphs_per_s"] for r in train[1:] or train)  # the first step warms up (or compiles)
    tested = [r for r in rows if r.get("split") not in ("train", "memory") and "mae" in r]
    test_mae = f"{tested[-1]['mae']:.4f} (step {tested[-1]['step']:,})" if tested else "not evaluated"
    return ["| last step | passes completed (epoch) | median graphs/s | final loss | test MAE |", "|---:|---:|---:|---:|---:|",
            f"| {last['step']:,} | {last['epoch']} | {rate:,.0f} | {last['loss']:.4f} | {test_mae} |"]


def corpus_lines(shards: Path) -> list[str]:
    path = shards / "manifest.json"
    if not path.is_file():
        return ["The corpus was not sharded (no manifest.json)."]
    manifest = json.loads(path.read_text())
    splits = manifest["splits"]
    size = sum(s["bytes"] for split in splits.values() for s in split["shards"])
    counts = ", ".join(f"{name} {split['samples']:,}" for name, split in splits.items())
    return [f"{sum(s['samples'] for s in splits.values()):,} molecules ({counts}), {sum(len(s['shards']) for s in splits.values())} shards, "
            f"{size / 1e6:,.0f} MB"]


def summary(work: Path, shards: Path, out: Path, seconds: int) -> int:
    """summary.md of a run whose scratch folder is `work`, on the corpus in `shards`."""
    steps = read_steps(work)
    export = out / "export"
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in sorted(export.iterdir())) if export.is_dir() else "none"
    lines = [f"# launch/gpu-pretrain ({seconds} s)", "", "| step | status | seconds |", "|---|---|---:|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']} |" for s in steps]
    lines += ["", "## Corpus", "", *corpus_lines(shards), "", "## Pretraining", "", *training_lines(work / "run"), "",
              f"## Export\n\n{export}: {sizes}"]
    write_markdown(out / "summary.md", "\n".join(lines) + "\n", "gpu-pretrain", "--out")
    print("\n".join(lines))
    return 0 if steps and all(s["status"] == "ok" for s in steps) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_pretrain", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--shards", type=Path, required=True)
    s.add_argument("--node-budget", type=int, required=True)
    s.add_argument("--passes", type=float, default=1.0)
    r = sub.add_parser("summary")
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--shards", type=Path, required=True, help="the corpus's shards (WORK/shards, or gpu-pretrain --shards)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seconds", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "steps":
        print(pass_steps(args.shards, args.node_budget, args.passes))
        return 0
    return summary(args.work, args.shards, args.out, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
