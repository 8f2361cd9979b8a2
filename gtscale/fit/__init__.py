"""`gtscale fit DATA.csv [VALID.csv TEST.csv] --target-column y --out DIR`: from a CSV of molecules
and a measured property to a tested model that `gtscale predict` reads, in one command.

1. The molecules are read as the sharder reads a smiles-csv (prep/sources/smiles.py) and split:
   three files are train, valid and test; one file is split by `split` (random 80/10/10, scaffold,
   or a column naming each row's split).
2. The recipe's members are fitted: `ecfp` = ECFP4 + Tanimoto SVR and `kernel` = the SVR on ECFP4
   Tanimoto + an RBF kernel on a pretrained backbone's representation (experiments/kernel_svr.py;
   `init_from`, by default the shipped moses-egt), each on train ∪ valid with its hyperparameters
   chosen by 5-fold cross-validation over those molecules (experiments/ecfp.py's SELECTION);
   `finetune` = the backbone fine-tuned by the shipped recipe (configs/tasks/FINETUNE_CONFIG), one
   run per seed on shards of the table (DIR/shards, reused by a rerun), each at its best-validation
   checkpoint.
3. The model is chosen among each member alone and the members' mean, never on test: by the RMSE
   of the out-of-fold predictions over train ∪ valid when every member is an SVR, else on the valid
   split (which the fine-tuned seeds did not train on). It is written as DIR/export, an ensemble
   export (members.py) that `gtscale predict DIR/export` reads; DIR/members/ holds each member's own.
4. Every member, the chosen model and ECFP + SVR (the baseline) are scored on the test split through
   the prediction path `gtscale predict` takes: DIR/report.json, DIR/report.md (the table and the
   choice), DIR/parity.png and DIR/test-predictions.csv.

Rows the members cannot read (RDKit cannot parse them, or they are larger than the molecule caps of
prep/molecule_limits.py) or whose target is missing are left out and counted in the report.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gtscale.errors import UserError
from gtscale.io import atomic_write_text, claim_out_dir
from gtscale.prep.sources.base import MoleculeTable, scaffold_split

#: recipe → the members it fits (the default: the best arm measured in docs/results/moleculeace-table.md)
RECIPES: dict[str, tuple[str, ...]] = {"kernel": ("ecfp", "kernel"), "ecfp": ("ecfp",), "finetune": ("ecfp", "finetune"),
                                       "all": ("ecfp", "kernel", "finetune")}
#: The fine-tuning recipe of the finetune member (gtscale/configs/tasks/), from the backbone --init-from names.
FINETUNE_CONFIG = "moleculeace-egt-finetune.yaml"
DEFAULT_RECIPE = "kernel"
DEFAULT_BACKBONE = "moses-egt"
SPLITS = ("train", "valid", "test")
REPORT, REPORT_MD, PARITY, TEST_PREDICTIONS = "report.json", "report.md", "parity.png", "test-predictions.csv"
REPORT_FORMAT = "gtscale-fit"
#: What marks DIR as a folder fit wrote (the only one it replaces files in).
MARKERS = {REPORT: lambda record: record.get("format") == REPORT_FORMAT}
MEAN = "mean"  # the candidate that averages every member


def read_fit_table(inputs: list[Path], smiles_column: str, target_column: str, split: str, seed: int) -> MoleculeTable:
    """The molecules of one CSV split by `split` (random | scaffold | column:NAME), or of three CSVs
    (train, valid, test), as one table whose rows run through the files in order."""
    from gtscale.prep.sources.smiles import read_smiles_table

    if len(inputs) not in (1, 3):
        raise UserError(f"give one CSV (split by --split) or three (train, valid, test); got {len(inputs)}")
    if len(inputs) == 3:
        tables = [read_smiles_table(p, smiles_column, [target_column], "graph_regression") for p in inputs]
        sizes = np.cumsum([0] + [len(t.smiles) for t in tables])
        splits = {name: np.arange(sizes[i], sizes[i + 1], dtype=np.int64) for i, name in enumerate(SPLITS)}
        return MoleculeTable(name=inputs[0].name, smiles=[s for t in tables for s in t.smiles], idx=np.arange(sizes[-1], dtype=np.int64),
                             targets=np.concatenate([t.targets for t in tables]), target_names=[target_column],
                             task_type="graph_regression", splits=splits, source_files=list(inputs))
    column = split[len("column:"):] if split.startswith("column:") else None
    if column is None and split not in ("random", "scaffold"):
        raise UserError(f"--split: {split!r} is not one of random, scaffold, column:NAME")
    table = read_smiles_table(inputs[0], smiles_column, [target_column], "graph_regression", split_column=column, seed=seed)
    if split == "scaffold":
        table.splits = scaffold_split(table.smiles, seed)
    missing = [name for name in SPLITS if not len(table.splits.get(name, []))]
    other = sorted(set(table.splits) - set(SPLITS))
    if missing or other:
        raise UserError(f"{inputs[0]}: --split {split} gives splits {', '.join(sorted(table.splits))}; fit needs train, valid and test"
                        + (f" (no {', '.join(missing)} rows)" if missing else f" (unknown {', '.join(other)})"))
    return table


@dataclass
class Features:
    """What the members read of each split's molecules, the rows every member reads, their targets."""

    rows: dict[str, np.ndarray]  # split → table rows kept
    bits: dict[str, np.ndarray]
    z: dict[str, np.ndarray]  # the backbone's representation (kernel recipes)
    y: dict[str, np.ndarray]
    left_out: dict[str, dict[str, int]]  # split → reason → rows left out


def featurize(table: MoleculeTable, backbone, progress: bool) -> Features:
    """ECFP4 bits (and the backbone's representation) of every split; rows a member cannot read or
    without a target are left out of all of them, so that members are compared on the same rows."""
    from gtscale.experiments.ecfp import ecfp_rows
    from gtscale.inference import graph_representation

    rows, bits, z, y, left_out = {}, {}, {}, {}, {}
    for split in SPLITS:
        members = table.splits[split]
        smiles = [table.smiles[i] for i in members]
        b, reasons = ecfp_rows(smiles)
        if backbone is not None:
            rep, why = graph_representation(backbone, smiles)
            reasons = [a or c for a, c in zip(reasons, why)]
        target = table.targets[members, 0].astype(np.float64)
        reasons = [why or ("" if np.isfinite(t) else "target_missing") for why, t in zip(reasons, target)]
        keep = np.array([not why for why in reasons], bool)
        rows[split], bits[split], y[split] = members[keep], b[keep], target[keep]
        z[split] = rep[keep] if backbone is not None else None
        counts: dict[str, int] = {}
        for why in reasons:
            if why:
                counts[why] = counts.get(why, 0) + 1
        left_out[split] = counts
        if progress:
            print(f"{split}: {keep.sum()} molecules" + (f" ({sum(counts.values())} left out: {counts})" if counts else ""))
    for split in ("train", "valid"):
        if len(rows[split]) < 2:
            raise UserError(f"{table.source_files[0]}: the {split} split keeps {len(rows[split])} molecule(s) with a target; fit needs more")
    if len(rows["train"]) + len(rows["valid"]) < 10:
        raise UserError(f"{table.source_files[0]}: train and valid keep {len(rows['train']) + len(rows['valid'])} molecules; "
                        "5-fold cross-validation needs at least 10")
    return Features(rows, bits, z, y, left_out)


@dataclass
class FittedMember:
    """One member of the recipe, fitted: the export folders it writes (folder name → writer) and
    their weights within it, its predictions for the selection rows, what was chosen for it."""

    name: str
    writers: dict[str, Callable[[Path], Path]]
    weights: list[float]
    selection: np.ndarray  # predictions for the selection rows (Selection.rows)
    chosen: dict


@dataclass
class Selection:
    """The rows every candidate is scored on when choosing: table rows and their targets."""

    rows: np.ndarray
    y: np.ndarray
    rule: str


def svr_members(names: tuple[str, ...], features: Features, selection: Selection, record: dict, saved_backbone) -> list[FittedMember]:
    """The SVR members, fitted on train ∪ valid, with their out-of-fold predictions at the selection rows."""
    from gtscale.experiments.ecfp import SELECTION, fit_svr, write_svr_export
    from gtscale.experiments.kernel_svr import fit_kernel_svr, write_kernel_export

    pooled_rows = np.concatenate([features.rows["train"], features.rows["valid"]])
    at = at_rows(pooled_rows, selection.rows)
    fitted = []
    for name in names:
        if name == "ecfp":
            svr = fit_svr(features.bits, features.y, out_of_fold=True)
            writers = {name: lambda folder, svr=svr: write_svr_export(folder, svr, record)}
            chosen = {"C": svr.C, "selection": SELECTION, "cv_rmse": svr.cv_rmse}
        elif name == "kernel":
            svr = fit_kernel_svr(features.bits, features.z, features.y, out_of_fold=True)
            writers = {name: lambda folder, svr=svr: write_kernel_export(folder, svr, saved_backbone, record)}
            chosen = {"C": svr.C, "weight": svr.weight, "gamma": svr.gamma, "selection": SELECTION, "cv_rmse": svr.cv_rmse}
        else:
            continue
        fitted.append(FittedMember(name, writers, [1.0], svr.cv_predictions[at], chosen))
    return fitted


def finetune_member(table: MoleculeTable, out: Path, init_from: str, seeds: list[int], overrides: list[str],
                    progress: bool) -> tuple[FittedMember, np.ndarray, np.ndarray]:
    """(the shipped fine-tuning recipe (configs/tasks/FINETUNE_CONFIG) from `init_from`, one run per
    seed (`gtscale sweep`), each at its best-validation checkpoint; the valid rows it scored; the
    seeds' mean output there)."""
    from gtscale.experiments.sweep import ensemble_prediction, read_rows, run_sweep
    from gtscale.models.pretrained import export_path

    shards = shard_molecules(table, out / "shards", progress)
    config = Path(__file__).resolve().parent / "configs" / "tasks" / FINETUNE_CONFIG
    run_overrides = [f"data.shards={shards}", f"run_dir={out / 'finetune'}", f"init_from={export_path(init_from)}", *overrides]
    base = run_sweep(str(config), run_overrides, seeds, 1, "valid", "finetune")
    row = read_rows(base)[0]
    idx, mean, _ = ensemble_prediction(row)
    writers = {f"finetune-seed-{run['seed']}": lambda folder, source=Path(run["export"]): copy_export(source, folder) for run in row["runs"]}
    chosen = {"config": FINETUNE_CONFIG, "overrides": overrides, "seeds": seeds, "init_from": str(init_from),
              "best_valid": [run["best_valid"] for run in row["runs"]], "steps": [int(run["tag"].rsplit("-", 1)[-1]) for run in row["runs"]]}
    member = FittedMember("finetune", writers, [1.0] * len(writers), np.empty(0), chosen)
    return member, idx, mean[:, 0]


def shard_molecules(table: MoleculeTable, folder: Path, progress: bool) -> Path:
    """The table's molecules as shards (the sharder's defaults, reused when already written)."""
    from gtscale.format.manifest import merge_parts
    from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
    from gtscale.prep.writer import ShardOptions, shard_table

    shard_table(table, folder, ShardOptions(max_nodes=DEFAULT_MAX_ATOMS), progress=progress)
    merge_parts(folder)
    return folder


def copy_export(source: Path, folder: Path) -> Path:
    """A copy of the export folder `source` (gtscale wrote both)."""
    import shutil

    from gtscale.models.export import FILES

    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, folder / f".{name}.tmp")
        (folder / f".{name}.tmp").replace(folder / name)
    return folder


def at_rows(rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in `rows` of each of `wanted` (all present)."""
    order = np.argsort(rows)
    return order[np.searchsorted(rows, wanted, sorter=order)]


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    return {"rmse": float(root_mean_squared_error(y_true, y_pred)), "mae": float(mean_absolute_error(y_true, y_pred)),
            "r2": float(r2_score(y_true, y_pred)) if len(y_true) > 1 else float("nan")}


def choose(out_of_fold: dict[str, np.ndarray], y: np.ndarray) -> tuple[str, dict[str, float]]:
    """(the candidate with the lowest out-of-fold RMSE — each member alone, or the mean of all when
    there are several; ties: the first —, every candidate's out-of-fold RMSE)."""
    from sklearn.metrics import root_mean_squared_error

    candidates = dict(out_of_fold)
    if len(out_of_fold) > 1:
        candidates[MEAN] = np.mean(list(out_of_fold.values()), axis=0)
    scores = {name: float(root_mean_squared_error(y, pred)) for name, pred in candidates.items()}
    return min(scores, key=scores.get), scores


def fit(inputs: list[Path], out: Path, smiles_column: str = "smiles", target_column: str = "y", split: str = "random", seed: int = 0,
        recipe: str = DEFAULT_RECIPE, init_from: str = DEFAULT_BACKBONE, seeds: tuple[int, ...] = (0, 1, 2),
        finetune_overrides: tuple[str, ...] = (), progress: bool = True) -> dict:
    """Fit, choose, export and test (module docstring); returns the report written to out/report.json."""
    from gtscale.models.export import claim_export_dir

    began = time.perf_counter()
    if recipe not in RECIPES:
        raise UserError(f"--recipe: {recipe!r} is not one of {', '.join(RECIPES)}")
    out = claim_out_dir(out, MARKERS, inputs=inputs)
    for folder in (out / "members", out / "export"):
        claim_export_dir(folder)  # nested member exports: only ones gtscale wrote are replaced
    out.mkdir(parents=True, exist_ok=True)
    if not (out / REPORT).is_file():  # marks the folder as fit's before anything else is written in it: a rerun may replace it all
        atomic_write_text(out / REPORT, json.dumps({"format": REPORT_FORMAT, "finished": False}))
    names = RECIPES[recipe]
    saved_backbone, backbone = load_backbone(init_from) if "kernel" in names else (None, None)
    table = read_fit_table(inputs, smiles_column, target_column, split, seed)
    features = featurize(table, backbone, progress)
    record = {"dataset": table.name, "task": {"type": "graph_regression", "num_targets": 1, "target_names": [target_column]}}
    fitted = []
    if "finetune" in names:
        finetuned, scored_rows, scored = finetune_member(table, out, init_from, list(seeds), list(finetune_overrides), progress)
        rows = np.intersect1d(features.rows["valid"], scored_rows)
        selection = Selection(rows, features.y["valid"][at_rows(features.rows["valid"], rows)], "lowest RMSE on the valid split")
        finetuned.selection = scored[at_rows(scored_rows, rows)]
        fitted.append(finetuned)
    else:
        rows = np.concatenate([features.rows["train"], features.rows["valid"]])
        selection = Selection(rows, np.concatenate([features.y["train"], features.y["valid"]]),
                              "lowest RMSE of out-of-fold predictions over train + valid (5 folds)")
    fitted = svr_members(names, features, selection, record, saved_backbone) + fitted
    chosen, scores = choose({m.name: m.selection for m in fitted}, selection.y)
    chosen_members = [m for m in fitted if chosen in (m.name, MEAN)]
    for member in fitted:
        write_member(out / "members" / member.name, member)
    write_ensemble(out / "export", chosen_members)
    test, test_smiles, y_test, predictions, unread = test_metrics(out, fitted, table, features)
    report = {
        "format": REPORT_FORMAT, "out": str(out), "inputs": [str(p) for p in inputs], "smiles_column": smiles_column, "target": target_column,
        "split": split if len(inputs) == 1 else "files", "seed": seed, "recipe": recipe, "backbone": str(init_from),
        "molecules": {s: int(len(features.rows[s])) for s in SPLITS}, "left_out": features.left_out, "test_unread": unread,
        "members": {m.name: m.chosen for m in fitted},
        "selection": {"rule": selection.rule, "rows": int(len(selection.rows)), "candidates": scores, "chosen": chosen,
                      "members": [m.name for m in chosen_members]},
        "test": test, "baseline": "ecfp", "seconds": round(time.perf_counter() - began, 1),
    }
    write_test_predictions(out / TEST_PREDICTIONS, test_smiles, y_test, predictions)
    parity_plot(out / PARITY, y_test, predictions["chosen"], f"{target_column}: test, {'+'.join(m.name for m in chosen_members)}")
    atomic_write_text(out / REPORT_MD, report_markdown(report))
    atomic_write_text(out / REPORT, json.dumps(report, indent=1))
    return report


def write_member(folder: Path, member: FittedMember) -> None:
    """A member's own export: the folder itself for one part, an ensemble export of its parts otherwise."""
    if len(member.writers) == 1:
        next(iter(member.writers.values()))(folder)
        return
    for name, write in member.writers.items():
        write(folder / name)
    write_ensemble_record(folder, list(member.writers), member.weights)


def write_ensemble(folder: Path, members: list[FittedMember]) -> None:
    """DIR/export: the chosen members' export folders side by side, equal shares per member."""
    import shutil

    from gtscale.models.export import EXPORT_MARKERS

    names, weights = [], []
    for member in members:
        total = sum(member.weights)
        for (name, write), weight in zip(member.writers.items(), member.weights):
            write(folder / name)
            names.append(name)
            weights.append(weight / total / len(members))
    for stale in folder.iterdir():  # members of an earlier fit's choice (export folders gtscale wrote)
        if stale.is_dir() and stale.name not in names and any((stale / marker).is_file() for marker in EXPORT_MARKERS):
            shutil.rmtree(stale)
    write_ensemble_record(folder, names, weights)


def test_metrics(out: Path, fitted: list[FittedMember], table: MoleculeTable, features: Features):
    """(metrics of each member, the chosen model and, as `baseline`, ECFP + SVR on the test molecules
    every one of them reads; those molecules' SMILES, targets and predictions; how many were unread),
    each model predicting through predict's own path from its export."""
    from gtscale.experiments.ensemble import ensemble
    from gtscale.members import load_members
    from gtscale.predict import Predictor

    smiles = [table.smiles[i] for i in features.rows["test"]]
    folders = {m.name: out / "members" / m.name for m in fitted} | {"chosen": out / "export"}
    values, readable = {}, np.ones(len(smiles), bool)
    for name, folder in folders.items():
        members, weights = load_members(folder)
        outputs, reasons = Predictor(members, weights).smiles(smiles, batch_size=64)
        values[name] = ensemble(outputs, weights)[0][:, 0]
        readable &= np.array([not why for why in reasons], bool)
    y = features.y["test"][readable]
    predictions = {name: v[readable] for name, v in values.items()}
    test = {name: regression_metrics(y, pred) for name, pred in predictions.items()}
    return test, [s for s, ok in zip(smiles, readable) if ok], y, predictions, int((~readable).sum())


def load_backbone(init_from: str):
    """(the export as read, as a model that computes representations) of `init_from`: a path or a shipped name."""
    from gtscale.experiments.ecfp import SVR_EXPORT_NAME
    from gtscale.experiments.kernel_svr import KERNEL_EXPORT_NAME
    from gtscale.inference import check_record, load_model_export
    from gtscale.models.export import read_export
    from gtscale.models.pretrained import export_path

    saved = read_export(export_path(init_from))
    if saved.config.get("name") in (SVR_EXPORT_NAME, KERNEL_EXPORT_NAME):
        raise UserError(f"--init-from {init_from}: an SVR export has no graph representation; name a gtscale model export")
    check_record(saved.meta, saved.folder)
    return saved, load_model_export(saved.folder, saved.config, saved.state, saved.meta)


def write_ensemble_record(folder: Path, names: list[str], weights: list[float]) -> None:
    """ensemble.json: the member folders beside it and their weights (members.load_members)."""
    from gtscale.models.export import ENSEMBLE_FILE, ENSEMBLE_FORMAT

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / ENSEMBLE_FILE, json.dumps({"format": ENSEMBLE_FORMAT, "members": names, "weights": weights}, indent=1))


def write_test_predictions(path: Path, smiles: list[str], y: np.ndarray, scored: dict[str, np.ndarray]) -> None:
    import pandas as pd

    frame = pd.DataFrame({"smiles": smiles, "measured": y, **{f"{name}_pred": pred for name, pred in scored.items()}})
    atomic_write_text(path, frame.to_csv(index=False))


def parity_plot(path: Path, y: np.ndarray, pred: np.ndarray, title: str) -> None:
    """Predicted against measured, with the diagonal, as a PNG (written whole or not at all)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.scatter(y, pred, s=10, alpha=0.6)
    low, high = float(min(y.min(), pred.min())), float(max(y.max(), pred.max()))
    ax.plot([low, high], [low, high], color="grey", linewidth=1)
    ax.set_xlabel("measured")
    ax.set_ylabel("predicted")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


LABELS = {"ecfp": "ECFP4 + SVR (baseline)", "kernel": "ECFP4 + backbone kernel SVR", "finetune": "fine-tuned backbone (mean of seeds)",
          "chosen": "chosen model (export/)"}


def report_markdown(report: dict) -> str:
    """The test table (each member and the chosen model, beside the baseline) and the choice."""
    n = report["molecules"]
    lines = [f"# gtscale fit: {report['target']} of {Path(report['inputs'][0]).name}", "",
             f"{n['train']} train, {n['valid']} valid, {n['test']} test molecules (split: {report['split']}); recipe {report['recipe']}"
             + (f", backbone {report['backbone']}" if report["backbone"] else "") + f"; {report['seconds']} s.", "",
             "| model | test RMSE | test MAE | test R² | RMSE ÷ baseline |", "| --- | --- | --- | --- | --- |"]
    base = report["test"][report["baseline"]]["rmse"]
    for name, m in report["test"].items():
        lines.append(f"| {LABELS.get(name, name)} | {m['rmse']:.4f} | {m['mae']:.4f} | {m['r2']:.3f} | {m['rmse'] / base:.3f} |")
    sel = report["selection"]
    lines += ["", f"Chosen on train + valid only ({sel['rule']}): **{sel['chosen']}** "
              + "(" + ", ".join(f"{k} {v:.4f}" for k, v in sel["candidates"].items()) + ").", "",
              f"`gtscale predict {report['out']}/export --input mols.csv --out preds.csv` predicts with it; parity.png plots its test predictions."]
    return "\n".join(lines) + "\n"
