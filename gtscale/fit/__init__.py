"""`gtscale fit DATA.csv [VALID.csv TEST.csv] --target-columns y [z …] --out DIR`: from a CSV of
molecules and measured properties (numbers, or 0/1 labels) to a tested model that `gtscale predict`
reads, in one command.

1. The molecules are read as the sharder reads a smiles-csv (prep/sources/smiles.py) and split:
   three files are train, valid and test; one file is split by `split` (random 80/10/10, scaffold,
   or a column naming each row's split). The task is the target columns': classification when each
   holds only 0 and 1 (blank cells aside), else regression; `task` names it instead.
2. The recipe's members: `ecfp` = ECFP4 + Tanimoto SVR and `kernel` = the SVR on an ECFP4
   similarity (Tanimoto or MinMax) + an RBF kernel on a pretrained backbone's representation
   (members/kernel_svr.py; `init_from`, by default the shipped moses-egt), one model per
   target column on the molecules labelled for it (a blank cell leaves the molecule out of that
   column only), each on train ∪ valid with its hyperparameters chosen by 5-fold cross-validation
   over those molecules (members/svr.py's SELECTION); a classification's are SVCs, C chosen by ROC-AUC, with
   Platt's sigmoid fitted on the same folds' out-of-fold decision values (svr.calibrate), so that
   they predict probabilities. `finetune` = the backbone fine-tuned by the shipped recipe
   (configs/tasks/FINETUNE_CONFIG; a classification's with loss bce), one run per seed on shards of
   the table (DIR/shards, reused by a rerun), each choosing its step by the best validation score
   and then refitted, like the SVRs, on train ∪ valid for that many steps (`gtscale sweep --refit`):
   one head of every target column, whose loss counts the labelled cells alone. `landmark` = the
   kernel member's kernel on landmark molecules with ridge, one model of every target column
   (members/landmark.py, fit/scalable.py); `forest` = ECFP4 + random forest, the baseline of large
   sets, scored and never chosen. Recipe `auto` (the default) picks the members by the set's size
   and the CPU budget (fit/plan.py): the exact SVR members where their kernel matrices fit,
   the landmark model and, budget permitting, one fine-tuned seed without a refit beyond.
3. Per target, the model is chosen among each member alone and the members' mean, never on test:
   by the out-of-fold predictions over train ∪ valid when every member is an SVR (SVC), else on the
   valid split, read from the fine-tuned seeds before their refit and from the landmark model
   fitted on train alone (neither had trained on it); a
   regression by RMSE, a classification by ROC-AUC (what chose each SVC's C), ties broken by the
   lower log loss (only a tie-break: it flatters the SVCs, whose sigmoid was fitted on those same
   out-of-fold values, while ROC-AUC does not move under the sigmoid). Per target, not overall: targets differ in how many molecules
   label them and in what predicts them, and every member predicts every target, so each column
   takes its own best at no cost. It is written as DIR/export (fit/exports.py), which `gtscale
   predict DIR/export` reads: the chosen members as an ensemble export, or for several targets the
   members chosen for any, with each target's shares, one output column per target.
4. Every member, the chosen model and the baseline (ECFP + SVR (SVC), or the forest) are scored on the test split
   through the prediction path `gtscale predict` takes (fit/report.py): DIR/report.json, DIR/report.md
   (the tables and the choice), DIR/parity.png or, for a classification, DIR/roc.png, and
   DIR/test-predictions.csv.

A molecule in several rows (by canonical SMILES) is counted across and within the splits and warned
of, or made one row before the split (`duplicates`: fit/duplicates.py); a test split of train's
molecules alone is refused.

Rows the members cannot read (RDKit cannot parse them, or they are larger than the molecule caps of
prep/molecule_limits.py) are left out of every target, blank cells of their target, and both are
counted in the report.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.fit.checks import check_targets_vary, refuse_infinite_targets, refuse_unused_options, scaffold_words
from gtscale.fit.duplicates import handle_duplicates
from gtscale.fit.exports import MEAN, FittedMember, claim_export_folders, copy_export, planned_files, write_choice, write_member
from gtscale.fit.plan import ALL_TARGET_MEMBERS, DEFAULT_BUDGET, Plan, plan
from gtscale.fit.scalable import forest_baseline, landmark_member
from gtscale.fit.report import (FIGURES, REPORT, REPORT_FORMAT, REPORT_MD, TEST_PREDICTIONS, model_labels, report_markdown, score_tests,
                                write_figure, write_test_predictions)
from gtscale.fit.written import RECORD, RECORD_FORMAT, WrittenRecord, legacy_files, remove_if_unused
from gtscale.io import atomic_write_text, claim_out_dir
from gtscale.prep.sources.base import MoleculeTable, scaffold_split

#: recipe → the members it fits (the default: the best arm measured in docs/results/moleculeace-table.md)
#: (auto: by the set's size and the budget, fit/plan.py; forest is the large sets' baseline, scored, never chosen)
RECIPES: dict[str, tuple[str, ...]] = {"kernel": ("ecfp", "kernel"), "ecfp": ("ecfp",), "finetune": ("ecfp", "finetune"),
                                       "all": ("ecfp", "kernel", "finetune"), "landmark": ("forest", "landmark"),
                                       "large": ("forest", "landmark", "finetune")}
#: The fine-tuning recipe of the finetune member (gtscale/configs/tasks/), from the backbone --init-from names.
FINETUNE_CONFIG = "moleculeace-egt-finetune.yaml"
DEFAULT_RECIPE = "auto"
DEFAULT_BACKBONE = "moses-egt"
DEFAULT_SEEDS = (0, 1, 2)
SPLITS = ("train", "valid", "test")
TASKS = ("regression", "classification")
#: Each task's shard task type, and the overrides that fine-tune for it (a classification: logits
#: trained by BCE, the best checkpoint by valid ROC-AUC averaged over the target columns).
TABLE_TASKS = {"regression": "graph_regression", "classification": "graph_classification"}
FINETUNE_TASKS = {"regression": [], "classification": ["task.loss=bce", "task.metric=rocauc", "task.evaluator=binary"]}
#: How each task's candidates are compared when choosing.
BEST = {"regression": "lowest RMSE", "classification": "highest ROC-AUC"}
#: What fit does with a molecule that occurs in more than one row (fit/duplicates.py).
DUPLICATES = ("warn", "aggregate")
#: What marks DIR as a folder fit wrote (the only one it replaces files in).
MARKERS = {REPORT: lambda record: record.get("format") == REPORT_FORMAT, RECORD: lambda record: record.get("format") == RECORD_FORMAT}


def read_fit_table(inputs: list[Path], smiles_column: str, target_columns: list[str], split: str, seed: int) -> MoleculeTable:
    """The molecules of one CSV split by `split` (random | scaffold | column:NAME), or of three CSVs
    (train, valid, test), as one table whose rows run through the files in order (idx = row)."""
    from gtscale.prep.sources.smiles import read_smiles_table

    if len(inputs) not in (1, 3):
        raise UserError(f"give one CSV (split by --split) or three (train, valid, test); got {len(inputs)}")
    twice = next((c for i, c in enumerate(target_columns) if c in target_columns[:i]), None)
    if twice is not None:
        raise UserError(f"--target-columns: {twice!r} is named twice")
    if len(inputs) == 3:
        tables = [read_smiles_table(p, smiles_column, target_columns, "graph_regression") for p in inputs]
        for table in tables:
            refuse_infinite_targets(table)
        sizes = np.cumsum([0] + [len(t.smiles) for t in tables])
        splits = {name: np.arange(sizes[i], sizes[i + 1], dtype=np.int64) for i, name in enumerate(SPLITS)}
        return MoleculeTable(name=inputs[0].name, smiles=[s for t in tables for s in t.smiles], idx=np.arange(sizes[-1], dtype=np.int64),
                             targets=np.concatenate([t.targets for t in tables]), target_names=list(target_columns),
                             task_type="graph_regression", splits=splits, source_files=list(inputs))
    column = split[len("column:"):] if split.startswith("column:") else None
    if column is None and split not in ("random", "scaffold"):
        raise UserError(f"--split: {split!r} is not one of random, scaffold, column:NAME")
    if column is not None and not column.strip():
        raise UserError(f"--split {split}: name the column after column: (column:NAME, a column naming each row's split)")
    table = read_smiles_table(inputs[0], smiles_column, target_columns, "graph_regression", split_column=column, seed=seed)
    refuse_infinite_targets(table)
    if split == "scaffold":
        table.splits = scaffold_split(table.smiles, seed)
    missing = [name for name in SPLITS if not len(table.splits.get(name, []))]
    other = sorted(set(table.splits) - set(SPLITS))
    if missing and split == "scaffold":
        raise UserError(f"{inputs[0]}: --split scaffold leaves no {', '.join(missing)} rows: {scaffold_words(table.smiles)}; a scaffold split keeps "
                        "each scaffold in one split, so use --split random or give the splits (column:NAME, or three files)")
    if missing or other:
        raise UserError(f"{inputs[0]}: --split {split} gives splits {', '.join(sorted(table.splits))}; fit needs train, valid and test"
                        + (f" (no {', '.join(missing)} rows)" if missing else f" (unknown {', '.join(other)})"))
    return table


def fit_task(table: MoleculeTable, task: str) -> str:
    """regression or classification: `task`, or for auto, classification when every target column
    holds only 0 and 1 (blank cells aside), else regression; a UserError naming the column where a
    classification would read another value, or the columns' kinds differ."""
    if task not in ("auto", *TASKS):
        raise UserError(f"--task: {task!r} is not one of auto, {', '.join(TASKS)}")
    where = ", ".join(str(p) for p in table.source_files)
    binary = {}
    for t, name in enumerate(table.target_names):
        values = table.targets[:, t][np.isfinite(table.targets[:, t])]
        other = values[(values != 0) & (values != 1)]
        if task == "classification" and len(other):
            raise UserError(f"{where}: --task classification, but target column {name!r} holds {other[0]:g}; a classifier reads labels 0 and 1")
        binary[name] = not len(other)
    if task != "auto":
        return task
    if len(set(binary.values())) > 1:
        labels, numbers = [n for n, b in binary.items() if b], [n for n, b in binary.items() if not b]
        raise UserError(f"{where}: target column(s) {', '.join(labels)} hold 0/1 labels (classification), {', '.join(numbers)} other numbers "
                        "(regression); fit one task per call, or pass --task regression")
    return "classification" if all(binary.values()) else "regression"


@dataclass
class Features:
    """What the members read of each split's molecules: the table rows every member reads, their
    ECFP4 counts (whose bits, the counts that are not 0, the ECFP SVR reads), the backbone's
    representation (kernel recipes), their targets. Of the whole
    table (featurize: y [n, T], NaN for a blank cell) or of one target (target: y [n])."""

    rows: dict[str, np.ndarray]  # split → table rows kept
    counts: dict[str, np.ndarray]
    z: dict[str, np.ndarray | None]
    y: dict[str, np.ndarray]
    left_out: dict[str, dict[str, int]]  # split → reason → rows left out

    def target(self, t: int) -> "Features":
        """The molecules labelled for target t, with its labels; left_out counts the blank cells."""
        keep = {s: np.isfinite(self.y[s][:, t]) for s in SPLITS}
        return Features({s: self.rows[s][keep[s]] for s in SPLITS}, {s: self.counts[s][keep[s]] for s in SPLITS},
                        {s: None if self.z[s] is None else self.z[s][keep[s]] for s in SPLITS}, {s: self.y[s][keep[s], t] for s in SPLITS},
                        {s: {"target_missing": int((~keep[s]).sum())} for s in SPLITS})


def featurize(table: MoleculeTable, backbone, progress: bool) -> Features:
    """ECFP4 counts (and the backbone's representation) of every split; rows a member cannot read are
    left out of all of them, so that members are compared on the same molecules."""
    from gtscale.members.fingerprints import ecfp_rows
    from gtscale.inference import graph_representation

    rows, counts, z, y, left_out = {}, {}, {}, {}, {}
    for split in SPLITS:
        members = table.splits[split]
        smiles = [table.smiles[i] for i in members]
        fingerprints, reasons = ecfp_rows(smiles, counts=True)
        if backbone is not None:
            rep, why = graph_representation(backbone, smiles)
            reasons = [a or c for a, c in zip(reasons, why)]
        keep = np.array([not why for why in reasons], bool)
        rows[split], counts[split], y[split] = members[keep], fingerprints[keep], table.targets[members[keep]].astype(np.float64)
        z[split] = rep[keep] if backbone is not None else None
        tally: dict[str, int] = {}
        for why in reasons:
            if why:
                tally[why] = tally.get(why, 0) + 1
        left_out[split] = tally
        if progress:
            print(f"{split}: {keep.sum()} molecules" + (f" ({sum(tally.values())} left out: {tally})" if tally else ""))
    return Features(rows, counts, z, y, left_out)


def check_target(where: str, name: str, labelled: Features, task: str, on_valid: bool) -> None:
    """Enough labelled molecules of target `name` to fit and choose: 10 in train and valid, 2 of
    them in each; for a classification 5 of each class (the stratified folds), and both classes in
    valid when the choice is made there (`on_valid`)."""
    from gtscale.members.svr import FOLDS

    for split in ("train", "valid"):
        if len(labelled.rows[split]) < 2:
            raise UserError(f"{where}: the {split} split keeps {len(labelled.rows[split])} molecule(s) labelled for {name!r}; fit needs more")
    pooled = np.concatenate([labelled.y["train"], labelled.y["valid"]])
    if len(pooled) < 2 * FOLDS:
        raise UserError(f"{where}: train and valid keep {len(pooled)} molecules labelled for {name!r}; {FOLDS}-fold cross-validation needs at least {2 * FOLDS}")
    if task == "classification":
        fewest = min((0, 1), key=lambda label: int((pooled == label).sum()))
        if (pooled == fewest).sum() < FOLDS:
            raise UserError(f"{where}: train and valid hold {int((pooled == fewest).sum())} molecule(s) labelled {fewest} in {name!r}; choosing C "
                            f"by {FOLDS}-fold stratified cross-validation needs {FOLDS} of each class")
        if on_valid and len(np.unique(labelled.y["valid"])) < 2:
            raise UserError(f"{where}: the valid split labels every molecule {labelled.y['valid'][0]:g} for {name!r}; the fine-tuned member is "
                            "chosen by ROC-AUC there, which needs both classes")


@dataclass
class Selection:
    """The rows every candidate is scored on when choosing: table rows and their targets."""

    rows: np.ndarray
    y: np.ndarray
    rule: str


@dataclass
class TargetFit:
    """One target's members, how they were compared, and the candidate chosen."""

    labelled: Features
    fitted: list[FittedMember]
    selection: Selection
    chosen: str
    candidates: dict[str, float]  # each candidate's selection score
    tie_break: dict[str, float]  # a classification's: each candidate's log loss at the same rows

    def chosen_members(self) -> list[str]:
        return [m.name for m in self.fitted if self.chosen in (m.name, MEAN)]


def svr_members(names: tuple[str, ...], labelled: Features, selection: Selection, record: dict, saved_backbone, task: str) -> list[FittedMember]:
    """The SVR (SVC) members, fitted on train ∪ valid, with their out-of-fold predictions at the selection rows."""
    from gtscale.members.svr import fit_svr, selection as rule, write_svr_export
    from gtscale.members.kernel_svr import fit_kernel_svr, write_kernel_export

    classifier = task == "classification"
    pooled_rows = np.concatenate([labelled.rows["train"], labelled.rows["valid"]])
    at = at_rows(pooled_rows, selection.rows)
    fitted = []
    for name in names:
        began = cpu_seconds()
        if name == "ecfp":
            svr = fit_svr({s: (c > 0).astype(np.uint8) for s, c in labelled.counts.items()}, labelled.y, out_of_fold=True, classifier=classifier)
            writers = {name: lambda folder, svr=svr: write_svr_export(folder, svr, record)}
            chosen = {"C": svr.C}
        elif name == "kernel":
            svr = fit_kernel_svr(labelled.counts, labelled.z, labelled.y, out_of_fold=True, classifier=classifier)
            writers = {name: lambda folder, svr=svr: write_kernel_export(folder, svr, saved_backbone, record)}
            chosen = {"C": svr.C, "similarity": svr.similarity, "weight": svr.weight, "gamma": svr.gamma}
        else:
            continue
        chosen |= {"selection": rule(classifier)} | ({"cv_rocauc": svr.cv_rocauc, "platt": list(svr.platt)} if classifier else {"cv_rmse": svr.cv_rmse})
        chosen["cpu_seconds"] = round(cpu_seconds() - began, 1)
        fitted.append(FittedMember(name, writers, [1.0], svr.cv_predictions[at], chosen))
    return fitted


def finetune_member(table: MoleculeTable, shards: Path, runs: Path, init_from: str, seeds: list[int], overrides: list[str],
                    progress: bool, refit: bool = True) -> tuple[FittedMember, np.ndarray, np.ndarray]:
    """(the shipped fine-tuning recipe (configs/tasks/FINETUNE_CONFIG) from `init_from` on the shards
    of `table`, one run per seed (`gtscale sweep`, in `runs`), each at its best-validation
    checkpoint: one head of every target column, its loss over the labelled cells alone
    (train/tasks.task_loss); the valid rows it scored; the seeds' mean output there [n, T])."""
    from gtscale.sweep import ensemble_prediction, read_rows, run_sweep, validated_row
    from gtscale.models.pretrained import export_path

    shard_molecules(table, shards, progress)
    config = Path(__file__).resolve().parent.parent / "configs" / "tasks" / FINETUNE_CONFIG
    quiet = [] if progress else ["logging.progress=false"]  # --no-progress reaches the training runs' bars too
    run_overrides = [f"data.shards={shards}", f"run_dir={runs}", f"init_from={export_path(init_from)}", *quiet, *overrides]
    base = run_sweep(str(config), run_overrides, seeds, 1, "valid", "finetune", refit=refit)
    row = read_rows(base)[0]
    idx, mean, _ = ensemble_prediction(validated_row(row) if refit else row)  # the refits trained on valid: the choice reads the validated runs
    writers = {f"finetune-seed-{run['seed']}": lambda folder, source=Path(run["export"]): copy_export(source, folder) for run in row["runs"]}
    chosen = {"config": FINETUNE_CONFIG, "overrides": overrides, "seeds": seeds, "init_from": str(init_from),
              "best_valid": [run["best_valid"] for run in row["runs"]]}
    chosen |= {"steps": [run["refit_step"] for run in row["runs"]], "refit": "train + valid"} if refit else {"refit": "none: the best-validation checkpoint"}
    member = FittedMember("finetune", writers, [1.0] * len(writers), np.empty(0), chosen, all_targets=True)
    return member, idx, mean


def shard_molecules(table: MoleculeTable, folder: Path, progress: bool) -> Path:
    """The table's molecules as shards (the sharder's defaults, reused when already written)."""
    from gtscale.format.manifest import merge_parts
    from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
    from gtscale.prep.writer import ShardOptions, shard_table

    shard_table(table, folder, ShardOptions(max_nodes=DEFAULT_MAX_ATOMS), progress=progress)
    merge_parts(folder)
    return folder


def at_rows(rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in `rows` of each of `wanted` (all present)."""
    order = np.argsort(rows)
    return order[np.searchsorted(rows, wanted, sorter=order)]


def choose(out_of_fold: dict[str, np.ndarray], y: np.ndarray, task: str = "regression") -> tuple[str, dict[str, float], dict[str, float]]:
    """(the best candidate — each member alone, or the mean of all when there are several —, every
    candidate's score, a classification's log losses): a regression's lowest RMSE (ties: the first),
    a classification's highest ROC-AUC, ties broken by the lower log loss (module docstring)."""
    from sklearn.metrics import log_loss, roc_auc_score, root_mean_squared_error

    from gtscale.members.ensemble import ensemble

    candidates = dict(out_of_fold)
    if len(out_of_fold) > 1:  # the mean predict makes of the members exported together (fit/exports.write_choice)
        candidates[MEAN] = ensemble(np.stack(list(out_of_fold.values())))[0]
    if task == "classification":
        scores = {name: float(roc_auc_score(y, pred)) for name, pred in candidates.items()}
        losses = {name: float(log_loss(y, pred, labels=[0, 1])) for name, pred in candidates.items()}
        return max(scores, key=lambda name: (scores[name], -losses[name])), scores, losses
    scores = {name: float(root_mean_squared_error(y, pred)) for name, pred in candidates.items()}
    return min(scores, key=scores.get), scores, {}


def fit_target(t: int, labelled: Features, task: str, names: tuple[str, ...], record: dict, saved_backbone,
               shared: list[tuple[FittedMember, np.ndarray, np.ndarray]]) -> TargetFit:
    """Target t's members, fitted on its labelled molecules (the members in `shared` were fitted on
    every target at once, each with its valid rows and outputs there: their column t is read), and
    the candidate chosen among them."""
    fitted = []
    if shared:
        rows = labelled.rows["valid"]
        for _, scored_rows, _ in shared:
            rows = np.intersect1d(rows, scored_rows)
        selection = Selection(rows, labelled.y["valid"][at_rows(labelled.rows["valid"], rows)], f"{BEST[task]} on the valid split")
        fitted = [replace(member, selection=scored[at_rows(scored_rows, rows), t]) for member, scored_rows, scored in shared]
    else:
        rows = np.concatenate([labelled.rows["train"], labelled.rows["valid"]])
        selection = Selection(rows, np.concatenate([labelled.y["train"], labelled.y["valid"]]),
                              f"{BEST[task]} of out-of-fold predictions over train + valid (5 folds)")
    fitted = svr_members(names, labelled, selection, record, saved_backbone, task) + fitted
    chosen, scores, tie_break = choose({m.name: m.selection for m in fitted}, selection.y, task)
    return TargetFit(labelled, fitted, selection, chosen, scores, tie_break)


def fit(inputs: list[Path], out: Path, smiles_column: str = "smiles", target_columns: tuple[str, ...] = ("y",), task: str = "auto",
        split: str = "random", seed: int = 0, recipe: str = DEFAULT_RECIPE, init_from: str | None = None, seeds: tuple[int, ...] | None = None,
        finetune_overrides: tuple[str, ...] = (), duplicates: str = "warn", progress: bool = True, budget: float = DEFAULT_BUDGET) -> dict:
    """Fit, choose, export and test (module docstring); returns the report written to out/report.json.
    One fit at a time in `out`: it is locked as training locks its run_dir (train/run_lock.py),
    which also finds an unwritable `out` before any work."""
    from gtscale.train import run_lock

    if recipe not in ("auto", *RECIPES):
        raise UserError(f"--recipe: {recipe!r} is not one of auto, {', '.join(RECIPES)}")
    if task not in ("auto", *TASKS):
        raise UserError(f"--task: {task!r} is not one of auto, {', '.join(TASKS)}")
    if duplicates not in DUPLICATES:
        raise UserError(f"--duplicates: {duplicates!r} is not one of {', '.join(DUPLICATES)}")
    if recipe != "auto":  # auto's members are known once the set is read: fit_locked checks them against its plan
        refuse_unused_options(recipe, RECIPES[recipe], init_from, seeds, finetune_overrides)
    asked = (init_from, seeds)  # as given
    init_from, seeds = init_from or DEFAULT_BACKBONE, tuple(seeds or DEFAULT_SEEDS)
    out = claim_out_dir(out, MARKERS, inputs=inputs, own={run_lock.LOCK_FILE: run_lock.is_lock_file})
    new = not out.exists()
    lock = run_lock.acquire(out, option="--out", holder_name="another gtscale fit")
    try:
        written = WrittenRecord(out, legacy_files(out))  # what an earlier fit wrote here: only that is replaced or removed
        if new:
            written.save()  # marks the folder as fit's before anything else is written in it
        return fit_locked(inputs, out, written, smiles_column, target_columns, task, split, seed, recipe, init_from, seeds, finetune_overrides,
                          duplicates, progress, budget, asked)
    except UserError:
        if new:  # refused before its work: a folder it made for nothing goes again
            remove_if_unused(out, {REPORT, RECORD, run_lock.LOCK_FILE})
        raise
    finally:
        lock.release()


def fit_locked(inputs: list[Path], out: Path, written: WrittenRecord, smiles_column: str, target_columns: tuple[str, ...], task: str, split: str,
               seed: int, recipe: str, init_from: str, seeds: tuple[int, ...], finetune_overrides: tuple[str, ...], duplicates: str,
               progress: bool, budget: float, asked: tuple) -> dict:
    """fit's work, in `out` once fit holds it (`written`: its record of what fit wrote there)."""
    began = time.perf_counter()
    table = read_fit_table(inputs, smiles_column, list(target_columns), split, seed)
    task_from, task = "detected" if task == "auto" else "named", fit_task(table, task)
    table.task_type = TABLE_TASKS[task]
    table, repeats = handle_duplicates(table, task, duplicates, split if len(inputs) == 1 else "files", seed)
    check_targets_vary(table, task)
    chosen_plan = plan_members(table, recipe, budget)
    names, seeds = chosen_plan.members, seeds[:chosen_plan.finetune_seeds]
    if recipe == "auto":
        refuse_unused_options(recipe, names, *asked, finetune_overrides)
    if progress:
        print("\n".join(f"plan: {note}" for note in chosen_plan.notes))
    reports = {REPORT_MD, TEST_PREDICTIONS, FIGURES[task]}
    planned = planned_files(member_folders(names, seeds), len(table.target_names))
    written.check(planned | reports)  # a user's file where fit writes one, refused before the work
    claim_export_folders(out, planned)  # and a user's folder where fit writes an export
    written.claim(planned | reports)
    atomic_write_text(out / REPORT, json.dumps({"format": REPORT_FORMAT, "finished": False}))  # until the report replaces it: this fit did not finish
    saved_backbone, backbone = load_backbone(init_from) if {"kernel", "landmark"} & set(names) else (None, None)
    features = featurize(table, backbone, progress)
    targets, where = table.target_names, ", ".join(str(p) for p in table.source_files)
    labelled = [features.target(t) for t in range(len(targets))]
    for name, target in zip(targets, labelled):  # every target checked before any is fitted
        check_target(where, name, target, task, on_valid=bool(set(ALL_TARGET_MEMBERS) & set(names)))
    shared = []
    if "landmark" in names:
        shared.append(timed(landmark_member, features, task, table_record(table, task), saved_backbone))
    if "finetune" in names:
        steps = [] if chosen_plan.finetune_steps is None else [f"schedule.total_steps={chosen_plan.finetune_steps}"]
        shared.append(timed(finetune_member, table, out / "shards", out / "finetune", init_from, list(seeds),
                            FINETUNE_TASKS[task] + steps + list(finetune_overrides), progress, chosen_plan.finetune_refit))
    baseline_test = None
    if "forest" in names:
        began_forest = cpu_seconds()
        baseline_test, forest_chosen = forest_baseline(features, task, seed)
        forest_chosen["cpu_seconds"] = round(cpu_seconds() - began_forest, 1)
    results = []
    for t, name in enumerate(targets):
        if progress and len(targets) > 1:
            print(f"target {name}: {', '.join(f'{len(labelled[t].rows[s])} {s}' for s in SPLITS)}")
        results.append(fit_target(t, labelled[t], task, names, table_record(table, task, [name]), saved_backbone, shared))
    fitted = {member.name: [result.fitted[m] for result in results] for m, member in enumerate(results[0].fitted)}
    for name, per_target in fitted.items():
        written.wrote(write_member(out / "members" / name, per_target, targets))
    written.wrote(write_choice(out / "export", fitted, [result.chosen_members() for result in results], targets))
    earlier = written.retire(still_writing=reports)  # before scoring: an earlier fit's targets.json would be read before ensemble.json
    smiles = [table.smiles[i] for i in features.rows["test"]]
    scored_elsewhere = {} if baseline_test is None else {chosen_plan.baseline: baseline_test}
    test, test_smiles, y_test, predictions, unread = score_tests(out, [m.name for m in results[0].fitted], smiles, features.y["test"], task, targets,
                                                                 scored_elsewhere, chosen_plan.baseline)
    report = {
        "format": REPORT_FORMAT, "out": str(out), "inputs": [str(p) for p in inputs], "smiles_column": smiles_column, "task": task, "task_from": task_from,
        "split": split if len(inputs) == 1 else "files", "seed": seed, "recipe": recipe,
        "backbone": str(init_from) if {"kernel", "landmark", "finetune"} & set(names) else None,
        "molecules": {s: int(len(features.rows[s])) for s in SPLITS}, "left_out": features.left_out, "test_unread": unread, "duplicates": repeats,
        "targets": {name: target_report(result, test[name], y_test[:, t], task) for t, (name, result) in enumerate(zip(targets, results))},
        **({"mean": mean_over_targets(test)} if len(targets) > 1 else {}),
        "baseline": chosen_plan.baseline, "plan": {"notes": list(chosen_plan.notes), "estimated_cpu_seconds": chosen_plan.estimate, "budget_cpu_minutes": budget},
        "earlier_fit": earlier.as_dict(),
        **({"forest": forest_chosen} if baseline_test is not None else {}), "seconds": round(time.perf_counter() - began, 1),
    }
    write_test_predictions(out / TEST_PREDICTIONS, test_smiles, y_test, predictions, targets)
    write_figure(out / FIGURES[task], task, y_test, predictions, targets, model_labels(task))
    atomic_write_text(out / REPORT_MD, report_markdown(report))
    written.wrote(reports)
    atomic_write_text(out / REPORT, json.dumps(report, indent=1))
    return report


def member_folders(names: tuple[str, ...], seeds: tuple[int, ...]) -> dict[str, tuple[list[str], bool]]:
    """Each member of the recipe → (the export folders it writes, whether each predicts every target):
    an SVR its own, the fine-tuned member one per seed (finetune_member)."""
    return {name: ([f"finetune-seed-{s}" for s in seeds], True) if name == "finetune" else ([name], name in ALL_TARGET_MEMBERS)
            for name in names if name != "forest"}  # the forest is scored, never exported


def target_report(result: TargetFit, test: dict, y_test: np.ndarray, task: str) -> dict:
    """One target's part of report.json: its labelled molecules, members, choice and test metrics."""
    labelled = y_test[np.isfinite(y_test)]
    return {"molecules": {s: int(len(result.labelled.rows[s])) for s in SPLITS},
            "missing": {s: counts["target_missing"] for s, counts in result.labelled.left_out.items()},
            "members": {m.name: m.chosen for m in result.fitted},
            "selection": {"rule": result.selection.rule, "rows": int(len(result.selection.rows)), "candidates": result.candidates,
                          "chosen": result.chosen, "members": result.chosen_members(),
                          **({"logloss": result.tie_break} if result.tie_break else {})},
            "test": test, **({"test_labelled": int(len(labelled)), "test_positives": int(labelled.sum())} if task == "classification" else {})}


def mean_over_targets(test: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """model → each test metric's mean over the targets (each target counts once, however many
    molecules it labels: the regression evaluator's rule, train/tasks.py)."""
    per_target = list(test.values())
    return {model: {metric: float(np.mean([t[model][metric] for t in per_target])) for metric in per_target[0][model]} for model in per_target[0]}


def plan_members(table: MoleculeTable, recipe: str, budget: float) -> Plan:
    """fit/plan.py's plan for this table: the most molecules labelled for one target in train + valid."""
    fitted_rows = np.concatenate([table.splits["train"], table.splits["valid"]])
    labelled = np.isfinite(table.targets[fitted_rows]).sum(0)
    return plan(recipe, RECIPES, int(labelled.max()), len(table.target_names), len(table.splits["train"]), budget)


def table_record(table: MoleculeTable, task: str, names: list[str] | None = None) -> dict:
    """What an export of the target columns `names` (default: every one) records of the table (its
    manifest's dataset and task)."""
    names = list(table.target_names if names is None else names)
    return {"dataset": table.name, "task": {"type": TABLE_TASKS[task], "num_targets": len(names), "target_names": names}}


def cpu_seconds() -> float:
    """CPU seconds of this process and the children it waited for (the fine-tuning runs)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fit_member, *args):
    """An all-target member's (member, rows, outputs), its CPU seconds recorded in what was chosen for it."""
    began = cpu_seconds()
    member, rows, scored = fit_member(*args)
    return replace(member, chosen={**member.chosen, "cpu_seconds": round(cpu_seconds() - began, 1)}), rows, scored


def load_backbone(init_from: str):
    """(the export as read, as a model that computes representations) of `init_from`: a path or a shipped name."""
    from gtscale.inference import check_record, load_model_export
    from gtscale.models.export import is_model, read_export
    from gtscale.models.pretrained import export_path

    saved = read_export(export_path(init_from))
    if not is_model(saved.config):
        raise UserError(f"--init-from {init_from}: an SVR export has no graph representation; name a gtscale model export")
    check_record(saved.meta, saved.folder)
    return saved, load_model_export(saved.folder, saved.config, saved.state, saved.meta)
