"""`gtscale bench fit`: how `gtscale fit` scales with molecules and target columns, on labelled MOSES
molecules (docs/results/fit-scaling.md).

The molecules are MOSES's test and scaffold-test splits (the shipped backbone pretrained on its
train split, so none of these was seen), shuffled with the seed; their labels are RDKit descriptors
that are not among the backbone's pretraining targets (LABELS), as regression columns, or for a
classification each thresholded at its POSITIVE_QUANTILE (a minority of positives); a share of the
cells (MISSING) is blanked, as assays leave molecules unmeasured. Each size is written once as
DIR/data/<name>.csv and fitted by `gtscale fit` in a process of its own (split random, the given
recipe, budget and split: random by default): its wall time, CPU time and peak memory (ru_maxrss of the process tree's
largest), and from its report the members it ran, their CPU time and each model's test metric
(the mean over the columns) beside the baseline. A size already fitted (its report.json finished)
is read back, so an interrupted table continues where it stopped.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.fit.report import member_cpu_seconds
from gtscale.io import atomic_write_text

#: Descriptor columns (Descriptors._descList names) that the shipped backbone was not pretrained on.
LABELS = ("BalabanJ", "BertzCT", "HallKierAlpha", "Kappa2", "Chi1v", "NumAromaticRings", "LabuteASA", "NumSaturatedRings", "qed", "fr_amide",
          "Chi0n", "NumAliphaticRings")
POSITIVE_QUANTILE, MISSING = 0.8, 0.2
SIZES, COLUMNS = (1000, 4000, 16000, 64000, 256000), (1, 12)
METRIC = {"regression": "rmse", "classification": "rocauc"}


def labelled_csv(folder: Path, molecules: int, columns: int, task: str, seed: int = 0, workers: int = 1) -> Path:
    """DIR/data/moses-<task>-<n>x<T>.csv: `molecules` MOSES molecules and `columns` label columns (module docstring)."""
    from gtscale.prep.sources.descriptors import compute_descriptors
    from gtscale.prep.sources.moses import read_moses

    if not 1 <= columns <= len(LABELS):
        raise UserError(f"--columns: {columns}; the benchmark labels 1 to {len(LABELS)} columns")
    path = folder / "data" / f"moses-{task}-{molecules}x{columns}-seed{seed}.csv"
    if path.is_file():
        return path
    table = read_moses(splits_read=("test", "test_scaffolds"))
    pool = np.concatenate([table.splits["test"], table.splits["test_scaffolds"]])
    if molecules > len(pool):
        raise UserError(f"--sizes: {molecules:,} molecules; MOSES's test splits hold {len(pool):,}")
    rng = np.random.default_rng(seed)
    rows = rng.permutation(pool)[:molecules]
    smiles = [table.smiles[i] for i in rows]
    values = compute_descriptors(smiles, workers, progress=True, names=LABELS[:columns])
    if task == "classification":
        values = np.where(np.isfinite(values), (values > np.nanquantile(values, POSITIVE_QUANTILE, axis=0)).astype(float), np.nan)
    values[rng.random(values.shape) < MISSING] = np.nan
    lines = ["smiles," + ",".join(LABELS[:columns])]
    lines += [s + "," + ",".join("" if not np.isfinite(v) else f"{v:.6g}" for v in row) for s, row in zip(smiles, values)]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def fit_once(csv: Path, out: Path, columns: int, recipe: str, budget: float, seed: int, split: str = "random") -> dict:
    """One `gtscale fit` process: its measured resources and its report (read back when already finished)."""
    report_file, measured_file = out / "report.json", out / "measured.json"
    if measured_file.is_file() and report_file.is_file() and json.loads(report_file.read_text()).get("seconds") is not None:
        return json.loads(measured_file.read_text()) | {"report": json.loads(report_file.read_text())}
    command = [sys.executable, "-m", "gtscale.cli", "fit", str(csv), "--target-columns", *LABELS[:columns], "--out", str(out),
               "--recipe", recipe, "--budget", str(budget), "--seed", str(seed), "--split", split, "--no-progress"]
    began, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = subprocess.run(command, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if finished.returncode != 0:
        raise UserError(f"gtscale fit {csv} ended with exit status {finished.returncode}")
    measured = {"wall_s": round(time.perf_counter() - began, 1),
                "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
                "peak_rss_gib": round(after.ru_maxrss / 2**20, 2), "command": " ".join(command[2:])}
    atomic_write_text(measured_file, json.dumps(measured, indent=1))
    return measured | {"report": json.loads(report_file.read_text())}


def row(n: int, columns: int, result: dict, task: str) -> dict:
    report, metric = result["report"], METRIC[task]
    scores = report["mean"] if "mean" in report else next(iter(report["targets"].values()))["test"]
    targets = list(report["targets"].values())
    chosen = sorted({name for target in targets for name in target["selection"]["members"]})
    cpu = member_cpu_seconds(report)
    return {"molecules": n, "columns": columns, "wall_s": result["wall_s"], "cpu_s": result["cpu_s"], "peak_rss_gib": result["peak_rss_gib"],
            "members": list(cpu), "member_cpu_s": cpu, "chosen": chosen, "baseline": report["baseline"],
            "test": {model: values[metric] for model, values in scores.items()}, "command": result["command"]}


def markdown(rows: list[dict], task: str) -> str:
    metric = METRIC[task]
    lines = [f"| molecules | columns | wall s | CPU s | peak RSS GiB | members (CPU s) | chosen | chosen test {metric} | baseline test {metric} | "
             f"each member's test {metric} |", "| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |"]
    for r in rows:
        members = ", ".join(f"{m} {s:g}" for m, s in r["member_cpu_s"].items() if s is not None)
        each = ", ".join(f"{m} {v:.4f}" for m, v in r["test"].items() if m not in ("chosen", r["baseline"]))
        lines.append(f"| {r['molecules']:,} | {r['columns']} | {r['wall_s']:g} | {r['cpu_s']:g} | {r['peak_rss_gib']:g} | {members} | "
                     f"{' + '.join(r['chosen'])} | {r['test']['chosen']:.4f} | {r['baseline']} {r['test'][r['baseline']]:.4f} | {each} |")
    return "\n".join(lines) + "\n"


def bench_fit(out: Path, sizes: list[int], columns: list[int], task: str = "regression", recipe: str = "auto", budget: float = 40.0,
              seed: int = 0, workers: int = 1, json_path: str | None = None, split: str = "random") -> int:
    """Every size × column count in turn (module docstring); prints the table, writes DIR/fit-scaling.{md,json}."""
    if task not in METRIC:
        raise UserError(f"--task: {task!r} is not one of {', '.join(METRIC)}")
    rows = []
    for n in sizes:
        for t in columns:
            csv = labelled_csv(out, n, t, task, seed, workers)
            print(f"bench fit: {n:,} molecules × {t} column(s), recipe {recipe}", file=sys.stderr, flush=True)
            name = f"{task}-{n}x{t}-{recipe}" + ("" if split == "random" else f"-{split}")
            result = fit_once(csv, out / "runs" / name, t, recipe, budget, seed, split)
            rows.append(row(n, t, result, task))
            atomic_write_text(out / "fit-scaling.json", json.dumps({"task": task, "recipe": recipe, "budget": budget, "rows": rows}, indent=1))
            atomic_write_text(out / "fit-scaling.md", markdown(rows, task))
    print(markdown(rows, task), end="")
    if json_path:
        atomic_write_text(Path(json_path), json.dumps({"task": task, "recipe": recipe, "budget": budget, "rows": rows}, indent=1))
    return 0
