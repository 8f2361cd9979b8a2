"""The MoleculeACE paper's strongest classical methods (`gtscale baseline ecfp SHARDS --out DIR
[--seeds 0 1 2]`) on exactly the shards' split, as rows of the sweep tables.

ECFP4 (members/fingerprints.py) with an SVR on the Tanimoto kernel (MoleculeACE's SVM,
members/svr.py) and a random forest (scikit-learn), scored on the test split: RMSE, MAE and, for
MoleculeACE sets, the activity-cliff RMSE. SHARDS is any graph-level shard folder (`gtscale shard
smiles-csv`, `moleculeace`, …): its records keep their SMILES, and the molecules are read back from
them split by split (experiments/baseline_set.py), so the splits are the shards' record for
record. A classification task (manifest task.type graph_classification, 0/1 labels) gets a
Tanimoto SVC and a forest classifier instead, scored by ROC-AUC.

The SVR (SVC) is chosen by cross-validation over train and validation together (svr.SELECTION).
The forest is fitted on the train split with max_features chosen on the validation split
(cross-validating it would cost five times its 300-tree fits). The seed only changes the forest
(SVR is deterministic, its std is 0). Writes DIR/sweep.json and DIR/sweep.md (`gtscale sweep
--compare` reads them), and for the SVR its test predictions (DIR/svr-<split>.npz, what `gtscale
moleculeace-table`'s blend averages; an SVC's are logits) and DIR/export, an export `gtscale
predict` reads beside model exports (an SVC's predicts probabilities).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.members.fingerprints import ecfp
from gtscale.members.svr import FOLDS, fit_svr, selection, write_svr_export

RF_MAX_FEATURES = ("sqrt", 0.33, 1.0)
RF_TREES = 300
#: The file of the SVR's predictions in the baseline's folder.
PREDICTIONS = "svr-{split}.npz"


def fit_rf(x: dict, y: dict, seed: int, trees: int = RF_TREES, classifier: bool = False):
    """(test predictions, chosen): a forest on train, max_features chosen on valid by RMSE (ROC-AUC
    for a classifier, whose predictions are its probabilities of class 1)."""
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.metrics import roc_auc_score, root_mean_squared_error

    def forest(features):
        kind = RandomForestClassifier if classifier else RandomForestRegressor
        return kind(n_estimators=trees, max_features=features, random_state=seed, n_jobs=1).fit(x["train"], y["train"])

    def predict(model, bits):
        return model.predict_proba(bits)[:, list(model.classes_).index(1.0)] if classifier else model.predict(bits)

    def loss(features):  # lower is better
        pred = predict(forest(features), x["valid"])
        return -roc_auc_score(y["valid"], pred) if classifier else root_mean_squared_error(y["valid"], pred)

    best = min(RF_MAX_FEATURES, key=loss)
    return predict(forest(best), x["test"]), {"max_features": best}


def run_baseline(shards: Path, out: Path, seeds: list[int], models: list[str], split: str = "test", trees: int = RF_TREES,
                 target: str | None = None) -> list[dict]:
    """`models` (svr, rf) fitted on the shards' train and valid splits and scored on `split`, one run
    per seed, for `target` (default: the shards' only one); the sweep rows, also written to `out`
    (sweep.json, sweep.md)."""
    if trees < 1:
        raise UserError(f"--trees must be >= 1, got {trees}")
    from gtscale.experiments.baseline_set import read_baseline_set
    from gtscale.sweep import summarize, write_sweep

    data = read_baseline_set(shards, split, target, FOLDS)
    if "rf" in models and "valid" not in data.splits:
        raise UserError(f"{shards}: has no valid split, on which the random forest chooses max_features; pass --models svr")
    x = {name: ecfp(molecules.smiles, data.max_atoms) for name, molecules in data.splits.items()}
    y = {name: molecules.y for name, molecules in data.splits.items()}
    result = []
    for model in models:
        runs = []
        svr = fit_svr(x, y, classifier=data.classification) if model == "svr" else None  # deterministic: fitted once, one row per seed
        if svr is not None:
            pred = svr.predict(x["test"])
            save_predictions(out / PREDICTIONS.format(split=split), data.splits["test"].idx, pred, y["test"])
            write_svr_export(out / "export", svr, data.export_manifest())
        for seed in seeds:
            if svr is not None:
                chosen = {"C": svr.C, "selection": selection(data.classification)}
            else:
                pred, chosen = fit_rf(x, y, seed, trees, data.classification)
            runs.append({"seed": seed, "chosen": chosen, "metrics": data.metrics(pred)})
        name = ("SVC" if data.classification else "SVR") if model == "svr" else "RF"
        result.append({"label": f"ECFP4 + {name}", "shards": str(shards), "split": split, "target": data.target, "runs": runs,
                       "summary": summarize(runs)})
    write_sweep(out, result)
    return result


def save_predictions(path: Path, idx: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> None:
    """The SVR's predictions in the layout of a run's RUN/eval/<split>-<tag>.npz (idx, y_pred and
    y_true as [n, 1]), written whole or not at all: what the table's blend averages."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, idx=np.asarray(idx, np.int64), y_pred=np.asarray(y_pred, np.float64)[:, None], y_true=np.asarray(y_true, np.float64)[:, None])
    tmp.replace(path)


