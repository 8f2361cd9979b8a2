"""What `gtscale fit` reports of its models on the test split: every model predicts the test
molecules through `gtscale predict`'s own path from its export, and is scored per target (a
regression by RMSE, MAE and R², a classification by ROC-AUC, PR-AUC and log loss); report.md
tabulates them beside the baseline, parity.png (regression) or roc.png (classification) draws
them, test-predictions.csv lists them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gtscale.fit.duplicates import warnings
from gtscale.fit.plan import ALL_TARGET_MEMBERS
from gtscale.io import atomic_write_text

REPORT, REPORT_MD, TEST_PREDICTIONS = "report.json", "report.md", "test-predictions.csv"
#: The figure of each task: predicted against measured, or each model's ROC curve.
FIGURES = {"regression": "parity.png", "classification": "roc.png"}
REPORT_FORMAT = "gtscale-fit"
CHOSEN = "chosen"  # the chosen model (DIR/export) among the scored models


def score_tests(out: Path, members: list[str], smiles: list[str], y: np.ndarray, task: str, targets: list[str],
                scored_elsewhere: dict[str, np.ndarray], baseline: str):
    """(target → model → test metrics; the SMILES every model reads, [n, T] targets (NaN: no label)
    and model → [n, T] predictions of those molecules; how many test molecules some model did not
    read). The models: the baseline first, each member (DIR/members/<name>) and the chosen one
    (DIR/export), each predicting from its export as `gtscale predict` does, and the models that
    are not exported (`scored_elsewhere`: name → [n, T] outputs of the same molecules: the forest)."""
    from gtscale.members.ensemble import ensemble
    from gtscale.members.load import load_members
    from gtscale.predict import Predictor

    folders = {name: out / "members" / name for name in members} | {CHOSEN: out / "export"}
    values, readable = dict(scored_elsewhere), np.ones(len(smiles), bool)
    for name, folder in folders.items():
        found, weights = load_members(folder)
        outputs, reasons = Predictor(found, weights).smiles(smiles, batch_size=64)
        values[name] = ensemble(outputs, weights)[0]
        readable &= np.array([not why for why in reasons], bool)
    y = y[readable]
    order = [baseline, *(name for name in values if name != baseline)]
    predictions = {name: values[name][readable] for name in order}
    metrics = classification_metrics if task == "classification" else regression_metrics
    test = {}
    for t, target in enumerate(targets):
        labelled = np.isfinite(y[:, t])
        test[target] = {name: metrics(y[labelled, t], pred[labelled, t]) for name, pred in predictions.items()}
    return test, [s for s, ok in zip(smiles, readable) if ok], y, predictions, int((~readable).sum())


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    return {"rmse": float(root_mean_squared_error(y_true, y_pred)), "mae": float(mean_absolute_error(y_true, y_pred)),
            "r2": float(r2_score(y_true, y_pred)) if len(y_true) > 1 else float("nan")}


def classification_metrics(y_true: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """ROC-AUC and PR-AUC (average precision) of the probabilities, NaN where the test split holds
    one class alone; log loss (of calibration as well as ranking)."""
    from sklearn.metrics import average_precision_score, log_loss, roc_auc_score

    both = len(np.unique(y_true)) == 2
    return {"rocauc": float(roc_auc_score(y_true, p)) if both else float("nan"),
            "prauc": float(average_precision_score(y_true, p)) if both else float("nan"),
            "logloss": float(log_loss(y_true, p.astype(np.float64), labels=[0, 1]))}


def write_test_predictions(path: Path, smiles: list[str], y: np.ndarray, predictions: dict[str, np.ndarray], targets: list[str]) -> None:
    """smiles, then per target its measured value (blank: no label) and each model's prediction."""
    import pandas as pd

    columns = {"smiles": smiles}
    for t, target in enumerate(targets):
        columns[f"{target}_measured"] = y[:, t].astype(np.float32)  # as read (fit reads targets as float32): 5.51, not 5.510000228881836
        columns |= {f"{target}_{name}_pred": pred[:, t] for name, pred in predictions.items()}
    atomic_write_text(path, pd.DataFrame(columns).to_csv(index=False))


def write_figure(path: Path, task: str, y: np.ndarray, predictions: dict[str, np.ndarray], targets: list[str], labels: dict[str, str]) -> None:
    """One panel per target: the chosen model's predictions against the measured values (regression),
    or every model's ROC curve (classification); a PNG written whole or not at all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 4.5), squeeze=False)
    for t, (ax, target) in enumerate(zip(axes[0], targets)):
        labelled = np.isfinite(y[:, t])
        draw = roc_panel if task == "classification" else parity_panel
        draw(ax, y[labelled, t], {name: pred[labelled, t] for name, pred in predictions.items()}, labels)
        ax.set_title(f"{target}: test", fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def parity_panel(ax, y: np.ndarray, predictions: dict[str, np.ndarray], labels: dict[str, str]) -> None:
    pred = predictions[CHOSEN]
    ax.scatter(y, pred, s=10, alpha=0.6, label=labels[CHOSEN])
    low, high = float(min(y.min(), pred.min())), float(max(y.max(), pred.max()))
    ax.plot([low, high], [low, high], color="grey", linewidth=1)
    ax.set_xlabel("measured")
    ax.set_ylabel("predicted")
    ax.legend(fontsize=7, loc="upper left")


def roc_panel(ax, y: np.ndarray, predictions: dict[str, np.ndarray], labels: dict[str, str]) -> None:
    from sklearn.metrics import roc_auc_score, roc_curve

    ax.plot([0, 1], [0, 1], color="grey", linewidth=1)
    if len(np.unique(y)) == 2:
        for name, pred in predictions.items():
            fpr, tpr, _ = roc_curve(y, pred)
            ax.plot(fpr, tpr, linewidth=2 if name == CHOSEN else 1, label=f"{labels[name]} ({roc_auc_score(y, pred):.3f})")
        ax.legend(fontsize=7, loc="lower right")
    else:
        ax.text(0.5, 0.5, "one class only: no ROC curve", ha="center")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")


def model_labels(task: str) -> dict[str, str]:
    svm = "SVC" if task == "classification" else "SVR"
    return {"ecfp": f"ECFP4 + {svm} (baseline)", "kernel": f"ECFP4 + backbone kernel {svm}", "finetune": "fine-tuned backbone (mean of seeds)",
            "landmark": "ECFP4 + backbone kernel, landmark ridge" + (" classifier" if task == "classification" else ""),
            "forest": "ECFP4 + random forest (baseline)", CHOSEN: "chosen model (export/)"}


#: The test table of each task: (header, the row of one model's metrics beside the baseline's).
TABLES = {
    "regression": ("| model | test RMSE | test MAE | test R² | RMSE ÷ baseline |\n| --- | --- | --- | --- | --- |",
                   lambda m, base: f"{m['rmse']:.4f} | {m['mae']:.4f} | {m['r2']:.3f} | " + (f"{m['rmse'] / base['rmse']:.3f}" if base["rmse"] else "—")),
    "classification": ("| model | test ROC-AUC | test PR-AUC | test log loss | ROC-AUC − baseline |\n| --- | --- | --- | --- | --- |",
                       lambda m, base: f"{m['rocauc']:.4f} | {m['prauc']:.4f} | {m['logloss']:.4f} | {m['rocauc'] - base['rocauc']:+.4f}"),
}
#: How report.md says where the task came from (report.json `task_from`).
TASK_FROM = {"detected": {"classification": "detected: every target column holds only 0 and 1",
                          "regression": "detected: a target column holds other numbers than 0 and 1"},
             "named": {"classification": "named by --task", "regression": "named by --task"}}


def report_markdown(report: dict) -> str:
    """Per target, the test table (each member and the chosen model, beside the baseline) and the
    choice; with several targets, the table of each model's mean over them first."""
    task, targets = report["task"], list(report["targets"])
    n, labels = report["molecules"], model_labels(task)
    lines = [f"# gtscale fit: {', '.join(targets)} of {Path(report['inputs'][0]).name}", "",
             f"{n['train']} train, {n['valid']} valid, {n['test']} test molecules (split: {report['split']}); "
             f"{task} ({TASK_FROM[report['task_from']][task]}); recipe {report['recipe']}"
             + (f", backbone {report['backbone']}" if report["backbone"] else "") + f"; {report['seconds']} s.", "", left_out_line(report),
             "", *(f"- {note}" for note in report["plan"]["notes"]), "", members_table(report)]
    if repeats := warnings(report["duplicates"], aggregated=report["duplicates"]["rows_merged"] > 0):
        lines += ["", *(f"**Warning**: {line}." for line in repeats)]
    if report["duplicates"]["rows_merged"]:
        lines += ["", f"{report['duplicates']['rows_merged']} rows of molecules given more than once were merged into their molecule's row "
                  "(--duplicates aggregate: targets averaged)."]
    if len(targets) > 1:
        lines += ["", f"## Mean over the {len(targets)} targets", "", "Each target counts once; the model of each target is chosen on its own "
                  "(below), so the chosen model's row mixes members.", "", *test_table(report["mean"], task, report["baseline"])]
    for target, result in report["targets"].items():
        if len(targets) > 1:
            labelled = result["molecules"]
            lines += ["", f"## {target}", "", f"Labelled: {labelled['train']} train, {labelled['valid']} valid, {labelled['test']} test molecules."]
        if task == "classification":
            ones, labelled = result["test_positives"], result["test_labelled"]
            lines += ["", f"Test: {ones} of {labelled} molecules labelled 1 ({ones / max(labelled, 1):.3f}: the PR-AUC of a random ranking)."]
        if any(result["missing"].values()):
            lines += ["", f"Rows without a value of {target} (left out of its fit and test): "
                      + ", ".join(f"{n} {split}" for split, n in result["missing"].items()) + "."]
        lines += ["", *test_table(result["test"], task, report["baseline"])]
        lines += ["", "Each member's hyperparameters, chosen on train + valid: " + "; ".join(
            f"{labels[name] if name in labels else name}: {chosen_words(name, chosen)}" for name, chosen in result["members"].items()) + "."]
        sel = result["selection"]
        tie = f"; log loss {', '.join(f'{k} {v:.4f}' for k, v in sel['logloss'].items())}" if "logloss" in sel else ""
        lines += ["", f"Chosen on train + valid only ({sel['rule']}): **{sel['chosen']}** "
                  + "(" + ", ".join(f"{k} {v:.4f}" for k, v in sel["candidates"].items()) + tie + ")."]
    if earlier := earlier_fit_lines(report.get("earlier_fit", {})):
        lines += ["", *earlier]
    lines += ["", f"`gtscale predict {report['out']}/export --input mols.csv --out preds.csv` predicts with it"
              + ("" if len(targets) == 1 else " (a column per target)") + f"; {FIGURES[task]} plots its test predictions."]
    return "\n".join(lines) + "\n"


#: What each reason a row is left out for means (prep/featurize.py and prep/molecule_limits.py name them).
REASONS = {"invalid_smiles": "SMILES RDKit cannot read", "empty_smiles": "empty SMILES", "empty_molecule": "no atoms",
           "smiles_too_long": "SMILES beyond the length cap", "too_many_nodes": "more atoms than the cap"}


def left_out_line(report: dict) -> str:
    """Which rows of each split no member reads, and why (report.json `left_out`, `test_unread`)."""
    parts = [f"{sum(reasons.values())} {split} (" + ", ".join(f"{n} {REASONS.get(why, why.replace('_', ' '))}" for why, n in reasons.items()) + ")"
             for split, reasons in report["left_out"].items() if reasons]
    unread = f"; {report['test_unread']} more test rows some model could not read" if report.get("test_unread") else ""
    return ("Left out, as no member reads them: " + ", ".join(parts) + unread + "." if parts or unread
            else "Left out: no row (every molecule is read by every member).")


def chosen_words(member: str, chosen: dict) -> str:
    """A member's chosen hyperparameters in words (report.json targets.*.members)."""
    shown = {k: v for k, v in chosen.items() if k in ("C", "similarity", "weight", "gamma", "alpha", "landmarks", "seeds", "steps")}
    words = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())
    if member == "kernel" and chosen.get("weight") == 0:
        words += (" (weight 0: the backbone's kernel has no share, so this member is the ECFP4 baseline's model, its C chosen alike)"
                  if chosen.get("similarity", "tanimoto") == "tanimoto" else " (weight 0: the backbone's kernel has no share: an ECFP4 MinMax SVR)")
    return words


def test_table(test: dict[str, dict[str, float]], task: str, baseline: str) -> list[str]:
    """The lines of one test table: each model's metrics (model → metric → value) beside the baseline's."""
    header, row = TABLES[task]
    labels = model_labels(task)
    return [header, *(f"| {labels.get(name, name)} | {row(m, test[baseline])} |" for name, m in test.items())]


def member_cpu_seconds(report: dict) -> dict[str, float]:
    """Each member's CPU seconds over every target of a report.json (a member fitted per target
    counts each target's; one fitted once for all records the same time in each), the forest's too."""
    targets = list(report["targets"].values())
    seconds = {}
    for name in targets[0]["members"]:
        each = [target["members"][name].get("cpu_seconds") or 0.0 for target in targets]
        seconds[name] = round(each[0] if name in ALL_TARGET_MEMBERS else sum(each), 1)
    if "forest" in report:
        seconds["forest"] = report["forest"]["cpu_seconds"]
    return seconds


def members_table(report: dict) -> str:
    """What ran and what it cost: each member's CPU seconds."""
    labels = model_labels(report["task"])
    return "\n".join(["| member | CPU s |", "| --- | --- |", *(f"| {labels.get(name, name)} | {seconds} |" for name, seconds in member_cpu_seconds(report).items())])


def earlier_fit_lines(outcome: dict) -> list[str]:
    """report.md's lines on what a rerun did to an earlier fit's files (fit/written.py's Outcome.as_dict; none for a first fit)."""
    replaced, removed, kept = outcome.get("replaced", []), outcome.get("removed", []), outcome.get("kept", {})
    if not (replaced or removed or kept):
        return []
    lines = [f"This folder held an earlier fit: {len(replaced)} of its files replaced, {len(removed)} removed "
             f"(files it wrote that this fit does not write), {len(kept)} kept (files gtscale fit did not write, or changed since)."]
    lines += [f"- removed {path}" for path in removed]
    lines += [f"- kept {path} ({why})" for path, why in kept.items()]
    return lines
