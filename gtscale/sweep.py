"""One ordinary run per seed, then a table (`gtscale sweep CONFIG --seeds 0 1 2 [key=value …]`).

    gtscale sweep configs/tasks/moleculeace-egt-scratch.yaml --seeds 0 1 2 schedule.total_steps=500
    gtscale sweep --compare runs/scratch runs/finetune runs/ecfp      # side by side, one table

Each seed trains as `gtscale train CONFIG … seed=S data.loader.seed=S run_dir=<run_dir>/seed-S
--resume auto` (a subprocess: one process, or `--nproc N` through torchrun; the loader seed only
when the overrides do not fix it), one after another, so a sweep that was interrupted continues
where it stopped. Then `gtscale evaluate` (train/evaluate.py) scores each run's
best-validation checkpoint on the test split, exported as `gtscale export` does to
<run_dir>/seed-S/export (what `gtscale predict` reads); for MoleculeACE shards the activity-cliff
RMSE is added. <run_dir>/sweep.json holds every run's metrics and their mean ± sample std (ddof 1),
<run_dir>/sweep.md the same as a Markdown table; with several seeds a second row scores their
ensemble (the mean prediction, members/ensemble.py) on the same split (graph tasks). `--collect`
skips training (after the runs were trained elsewhere, e.g. as the SLURM array of
slurm/sweep.sbatch).

`--refit` chooses on validation and then trains on it too, as a cross-validated SVR is refitted on
train ∪ valid: each seed's run picks its step (its best-validation checkpoint), and a second run
<run_dir>/seed-S-refit trains the same config on data.train_split + data.eval_split ("train+valid")
for exactly that many steps (max_steps; schedule.total_steps unchanged, so its learning rate follows
the same curve); the refit's last checkpoint is the seed's model, scored and exported like any.
Each run's `validated` holds the seed's validated run scored on the same split, for comparison and
for choosing among models on validation (`gtscale fit`), which the refit has trained on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.io import atomic_write_text

SWEEP_FILE, TABLE_FILE = "sweep.json", "sweep.md"


# --- aggregation -----------------------------------------------------------------------------------
def summarize(runs: list[dict]) -> dict[str, dict]:
    """{metric: {mean, std, n}} over the runs' metrics; std is the sample std (ddof 1), 0 for one run.
    A metric missing or NaN in a run is left out of that metric's n."""
    names = sorted({k for r in runs for k in r["metrics"]})
    out = {}
    for name in names:
        values = np.array([r["metrics"][name] for r in runs if name in r["metrics"] and np.isfinite(r["metrics"][name])], dtype=float)
        if len(values):
            out[name] = {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0, "n": int(len(values))}
    return out


def markdown_table(rows: list[dict]) -> str:
    """Rows {label, summary} → a Markdown table, one column per metric, cells `mean ± std (n=…)`
    (`mean (n=1)` for a single run)."""
    first = ("rmse", "cliff_rmse", "mae")  # MoleculeACE's two metrics lead
    metrics = sorted({m for row in rows for m in row["summary"]}, key=lambda m: (first.index(m) if m in first else len(first), m))
    lines = ["| run | " + " | ".join(metrics) + " |", "|---|" + "---:|" * len(metrics)]
    for row in rows:
        cells = []
        for m in metrics:
            s = row["summary"].get(m)
            if s is None:
                cells.append("–")
            else:  # one run has no spread to show
                cells.append(f"{s['mean']:.4f} (n=1)" if s["n"] == 1 else f"{s['mean']:.4f} ± {s['std']:.4f} (n={s['n']})")
        lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_sweep(folder: Path, rows: list[dict]) -> None:
    """sweep.json ({"rows": [{label, runs, summary}]}) and sweep.md, atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / SWEEP_FILE, json.dumps({"rows": rows}, indent=1))
    atomic_write_text(folder / TABLE_FILE, markdown_table(rows))


def compare_table(folders: list[Path], out: Path | None = None) -> str:
    """One Markdown table of the rows of every sweep folder (also written to `out`)."""
    table = markdown_table([row for folder in folders for row in read_rows(folder)])
    if out is not None:
        atomic_write_text(out, table)
    return table


def read_rows(folder: Path) -> list[dict]:
    path = folder / SWEEP_FILE
    if not path.is_file():
        raise UserError(f"{folder}: no {SWEEP_FILE} (run `gtscale sweep` or `gtscale baseline ecfp` there first)")
    try:
        return json.loads(path.read_text())["rows"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a sweep file ({err})") from None


# --- running -------------------------------------------------------------------------------------
def train_command(config: str, overrides: list[str], seed: int, run_dir: Path, nproc: int) -> list[str]:
    # The seed varies the data order too (data.loader.seed) unless the overrides fix it.
    loader_seed = [] if any(o.startswith("data.loader.seed=") for o in overrides) else [f"data.loader.seed={seed}"]
    args = ["train", config, *overrides, f"seed={seed}", *loader_seed, f"run_dir={run_dir}", "--resume", "auto"]
    if nproc == 1:
        return [sys.executable, "-m", "gtscale.cli", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "gtscale.cli", *args]


def with_cliff_rmse(metrics: dict, shards: str | None, split: str, idx: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> dict:
    """`metrics` plus MoleculeACE's activity-cliff RMSE when the shards are a MoleculeACE set
    (records `idx` of `split`)."""
    from gtscale.prep.sources import moleculeace

    if shards is not None and moleculeace.is_moleculeace(shards):
        metrics = metrics | {"cliff_rmse": moleculeace.cliff_rmse(shards, split, idx, y_pred, y_true)}
    return metrics


def seed_metrics(run_dir: Path, seed: int, split: str, tag: str = "best") -> dict:
    """Test metrics of one run at checkpoint `tag` (its best-validation one by default; + cliff RMSE
    on MoleculeACE), whose export it leaves where `gtscale export` puts it (RUN_DIR/export: what
    predict reads)."""
    from gtscale.train.evaluate import evaluate_run, run_config

    result = evaluate_run(run_dir, split, tag, export_to=run_dir / "export")
    saved = np.load(run_dir / "eval" / f"{split}-{result['tag']}.npz")
    metrics = with_cliff_rmse(dict(result["metrics"]), run_config(run_dir).data.shards, split, saved["idx"], saved["y_pred"], saved["y_true"])
    best = best_record(run_dir)
    return {"seed": seed, "run_dir": str(run_dir), "tag": result["tag"], "export": result["export"], "best_valid": best.get("value"), "metrics": metrics}


def best_record(run_dir: Path) -> dict:
    """The run's best.json ({metric, value, step, tag}), or {} when it has none."""
    path = run_dir / "best.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def best_step(validated: Path) -> int:
    """The step of a run's best-validation checkpoint: how long its refit trains."""
    step = best_record(validated).get("step")
    if not isinstance(step, int) or step < 1:
        raise UserError(f"--refit: {validated} has no best-validation step (best.json); the refit trains for that many steps")
    return step


def refit_overrides(config: str, overrides: list[str], step: int) -> list[str]:
    """What turns a seed's run into its refit: train on its train and eval splits together for
    `step` steps, evaluating only at the end."""
    from gtscale.format.manifest import SPLIT_UNION
    from gtscale.train.preflight import load_train_config

    data = load_train_config(config, overrides).data
    return [f"data.train_split={data.train_split}{SPLIT_UNION}{data.eval_split}", f"max_steps={step}", "eval.every=0", "eval.patience=0"]


def run_sweep(config: str, overrides: list[str], seeds: list[int], nproc: int = 1, split: str = "test", label: str | None = None,
              collect: bool = False, seed_overrides: dict[int, list[str]] | None = None, refit: bool = False) -> Path:
    """Train (unless `collect`) and score one run per seed; the sweep's folder, holding SWEEP_FILE and
    TABLE_FILE. `seed_overrides`: overrides of one seed's run alone, after the common ones (such as
    shards of its own validation split); the row records them. `refit`: each seed's model is its
    refit on train ∪ valid (module docstring), the row's runs the refits."""
    from gtscale.train.preflight import load_train_config

    if nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {nproc}")
    if len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds: {seeds} repeats a seed")
    seed_overrides = seed_overrides or {}
    base = Path(load_train_config(config, overrides).run_dir)  # checks the config once, before any run
    runs = []
    for seed in seeds:
        run_dir = base / f"seed-{seed}"
        own = [*overrides, *seed_overrides.get(seed, [])]
        train_seed(config, own, seed, run_dir, nproc, collect)
        if not refit:
            runs.append(seed_metrics(run_dir, seed, split))
            continue
        refit_dir, step = base / f"seed-{seed}-refit", best_step(run_dir)
        train_seed(config, [*own, *refit_overrides(config, own, step)], seed, refit_dir, nproc, collect)
        validated = seed_metrics(run_dir, seed, split)
        runs.append(seed_metrics(refit_dir, seed, split, "latest") | {"best_valid": validated["best_valid"], "refit_step": step, "validated": validated})
    row = {"label": label or Path(config).stem, "config": config, "overrides": overrides, "split": split, "runs": runs, "summary": summarize(runs)}
    if refit:
        row["refit"] = True
    if seed_overrides:
        row["seed_overrides"] = {str(seed): seed_overrides[seed] for seed in seeds if seed_overrides.get(seed)}
    ensemble = ensemble_row(row) if len(runs) > 1 else None
    write_sweep(base, [row] if ensemble is None else [row, ensemble])
    return base


def train_seed(config: str, overrides: list[str], seed: int, run_dir: Path, nproc: int, collect: bool) -> None:
    """Train one seed's run (resuming it; a finished run returns at once); with `collect`, only check it was trained."""
    if collect:
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"--collect: {run_dir} has not been trained")
        return
    print(f"sweep: seed {seed} → {run_dir}", flush=True)
    status = subprocess.run(train_command(config, overrides, seed, run_dir, nproc)).returncode
    if status != 0:
        raise UserError(f"sweep: seed {seed} ({run_dir.name}) ended with exit status {status} (log above; rerun the sweep to continue it)")


def ensemble_row(row: dict) -> dict | None:
    """The ensemble of a sweep row's seeds as a row of its own: each seed's `split` predictions at
    its best-validation checkpoint (RUN/eval/<split>-<tag>.npz), averaged (members/ensemble.py), scored
    like one run (+ cliff RMSE on MoleculeACE). None for node tasks, whose Macro-F1 threshold is
    chosen per model on validation."""
    from gtscale.train.evaluate import run_config
    from gtscale.train.tasks import evaluate

    runs = row["runs"]
    cfg = run_config(Path(runs[0]["run_dir"]))
    if cfg.task.loss == "node_bce":
        return None
    idx, y_pred, y_true = ensemble_prediction(row)
    metrics = with_cliff_rmse(evaluate(y_pred, y_true, cfg.task), cfg.data.shards, row["split"], idx, y_pred, y_true)
    ensemble = {"seed": "ensemble", "seeds": [r["seed"] for r in runs], "tags": [r["tag"] for r in runs], "metrics": metrics}
    return {"label": f"{row['label']}, ensemble of {len(runs)}", "split": row["split"], "ensemble_of": row["label"], "runs": [ensemble], "summary": summarize([ensemble])}


def validated_row(row: dict) -> dict:
    """A refitted sweep row (run_sweep's `refit`) as the row of its validated runs."""
    return row | {"runs": [run["validated"] for run in row["runs"]]}


def ensemble_prediction(row: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx, the seeds' ensemble of outputs (members/ensemble.py), targets) of a sweep row's
    seeds on its split, each seed at its best-validation checkpoint (RUN/eval/<split>-<tag>.npz);
    the seeds must have scored the same samples."""
    from gtscale.members.ensemble import ensemble
    from gtscale.train.evaluate import run_config
    from gtscale.train.outputs import outputs

    split, runs = row["split"], row["runs"]
    saved = [np.load(Path(r["run_dir"]) / "eval" / f"{split}-{r['tag']}.npz") for r in runs]
    idx, y_true = saved[0]["idx"], saved[0]["y_true"]
    for run, other in zip(runs[1:], saved[1:]):
        if not np.array_equal(other["idx"], idx):
            raise UserError(f"{run['run_dir']}: scored other {split} samples than {runs[0]['run_dir']}; an ensemble needs the same shards")
    loss = run_config(Path(runs[0]["run_dir"])).task.loss
    return idx, ensemble(np.stack([outputs(s["y_pred"], loss) for s in saved]))[0], y_true
