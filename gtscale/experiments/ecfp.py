"""The MoleculeACE paper's strongest classical methods (`gtscale baseline ecfp SHARDS --out DIR
[--seeds 0 1 2]`) on exactly the shards' split, as rows of the sweep tables.

ECFP4 = RDKit Morgan fingerprints, radius 2, 2,048 bits. SVR with the Tanimoto kernel
(MoleculeACE's SVM) and a random forest (scikit-learn), scored on the test split: RMSE, MAE and,
for MoleculeACE sets, the activity-cliff RMSE. SHARDS is any graph-level shard folder (`gtscale
shard smiles-csv`, `moleculeace`, …): its records keep their SMILES, and the molecules are read
back from them split by split (experiments/baseline_set.py), so the splits are the shards'
record for record. A classification task (manifest task.type graph_classification, 0/1 labels)
gets a Tanimoto SVC and a forest classifier instead, scored by ROC-AUC.

The SVR (SVC) is chosen the MoleculeACE paper's way: C by 5-fold cross-validation over the shards'
train and validation molecules together, then one fit on all of them (SELECTION; the kernel SVR
of kernel_svr.py does the same; a classifier's folds keep the classes' proportions and score
ROC-AUC; the SVC then gets Platt's sigmoid, calibrate, which makes its scores calibrated
probabilities). The forest is fitted on the train split with max_features chosen on the validation
split (cross-validating it would cost five times its 300-tree fits). The seed only changes the
forest (SVR is deterministic, its std is 0). Writes DIR/sweep.json and DIR/sweep.md (`gtscale
sweep --compare` reads them), and for the SVR its test predictions (DIR/svr-<split>.npz, what
`gtscale moleculeace-table`'s blend averages; an SVC's are logits) and DIR/export, an export
`gtscale predict` reads beside model exports (an SVC's predicts probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from gtscale.config import from_dict, ranged
from gtscale.errors import UserError
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS, size_reason

RADIUS, BITS = 2, 2048
SVR_C = (0.1, 1.0, 10.0, 100.0)
RF_MAX_FEATURES = ("sqrt", 0.33, 1.0)
RF_TREES = 300
#: How an SVR's hyperparameters are chosen (recorded in its sweep row: a cached row of another
#: protocol is fitted again): scikit-learn's GridSearchCV over these folds of train ∪ valid,
#: shuffled with this seed, scored by RMSE, refitted on all of train ∪ valid. An SVC's folds are
#: stratified by class and score ROC-AUC.
FOLDS, FOLD_SEED = 5, 0
SELECTION = f"{FOLDS}-fold CV on train+valid, refit on train+valid"
SELECTION_CLASSIFIER = f"{FOLDS}-fold stratified CV (ROC-AUC) on train+valid, refit on train+valid"
#: What names an SVR export and a calibrated SVC's (model.yaml `name`), and the file of its predictions in the baseline's folder.
SVR_EXPORT_NAME, SVC_EXPORT_NAME = "ecfp-svr", "ecfp-svc"
#: export.json `task` of an SVR's export and of a calibrated SVC's (bce: predict turns its logits into
#: probabilities, train/outputs.py; ogbg-molhiv: the evaluator of one binary target by ROC-AUC).
EXPORT_TASKS = {False: {"loss": "mse", "metric": "rmse", "evaluator": "regression"},
                True: {"loss": "bce", "metric": "rocauc", "evaluator": "ogbg-molhiv"}}
PREDICTIONS = "svr-{split}.npz"


def ecfp(smiles: list[str], max_atoms: int = DEFAULT_MAX_ATOMS, counts: bool = False) -> np.ndarray:
    """[n, 2048] uint8 Morgan bits (radius 2) of each molecule, or with `counts` how often each bit is
    hit (ecfp_rows); a UserError for one that is not read."""
    bits, reasons = ecfp_rows(smiles, max_atoms, counts)
    row = next((i for i, reason in enumerate(reasons) if reason), None)
    if row is not None:
        raise UserError(f"SMILES {smiles[row][:80]!r} (row {row}) is not read ({reasons[row]})")
    return bits


def ecfp_rows(smiles: list[str], max_atoms: int = DEFAULT_MAX_ATOMS, counts: bool = False) -> tuple[np.ndarray, list[str]]:
    """([n, 2048] uint8 Morgan bits, radius 2, zero where a molecule is not read; [n] reasons, "" where
    it is). With `counts`, each bit's count of the atom environments hashed to it, capped at 255 (a
    drug-like molecule's rarely pass 60); its bits are exactly the counts that are not 0. A SMILES
    larger than `max_atoms` allows is refused before RDKit parses it (molecule_limits)."""
    from rdkit.Chem import rdFingerprintGenerator

    from gtscale.prep.featurize import FeaturizeError, parse_smiles  # the sharder's parse: its reasons, RDKit's log silenced

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=RADIUS, fpSize=BITS)
    fingerprint = generator.GetCountFingerprintAsNumPy if counts else generator.GetFingerprintAsNumPy
    out = np.zeros((len(smiles), BITS), dtype=np.uint8)
    reasons = [size_reason(s, max_atoms) or "" for s in smiles]
    for i, s in enumerate(smiles):
        if reasons[i]:
            continue
        try:
            out[i] = np.minimum(fingerprint(parse_smiles(s)), 255)
        except FeaturizeError as err:
            reasons[i] = err.reason
    return out, reasons


def tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto similarity of every row of a with every row of b (bit vectors)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    common = a @ b.T
    return common / np.maximum(a.sum(1)[:, None] + b.sum(1)[None, :] - common, 1e-12)


def minmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The MinMax (weighted Jaccard) similarity Σ_k min(a_k, b_k) / Σ_k max(a_k, b_k) of every row of a
    with every row of b (count vectors); Tanimoto's on bit vectors. Σ min is Σ_t over the levels t ≥ 1
    of the bits "count ≥ t" that both share: one matrix product per level, on the columns that reach it."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    shared = np.zeros((len(a), len(b)))
    level, top_a, top_b = 1, a.max(0, initial=0), b.max(0, initial=0)
    while (columns := np.flatnonzero((top_a >= level) & (top_b >= level))).size:
        shared += (a[:, columns] >= level).astype(np.float64) @ (b[:, columns] >= level).astype(np.float64).T
        level += 1
    return shared / np.maximum(a.sum(1)[:, None] + b.sum(1)[None, :] - shared, 1e-12)


def platt_logit(decision: np.ndarray, platt: tuple[float, float] | None) -> np.ndarray:
    """An SVR's values as they are; a calibrated SVC's decision values f as the logit of Platt's
    sigmoid, P(1) = 1 / (1 + exp(A·f + B)) = sigmoid(−(A·f + B)), for platt = (A, B)."""
    return decision if platt is None else -(platt[0] * decision + platt[1])


@dataclass(frozen=True)
class TanimotoSVR:
    """A fitted Tanimoto-kernel SVR in closed form: f(x) = Σ_i coef_i · T(x, s_i) + intercept over
    its support fingerprints s_i (scikit-learn's SVR with a precomputed kernel, its dual solution
    kept), so that an export of it predicts without scikit-learn or pickles. An SVC is the same
    form (its decision function) with Platt's (A, B) beside it."""

    support: np.ndarray  # [m, BITS] uint8 fingerprint bits of the support vectors
    coef: np.ndarray  # [m] float64 dual coefficients
    intercept: float
    C: float
    platt: tuple[float, float] | None = None  # a calibrated SVC's sigmoid (A, B) (platt_logit); None for an SVR
    cv_rmse: float = float("nan")  # the chosen C's mean RMSE over the cross-validation folds (fitting only; not exported)
    cv_rocauc: float = float("nan")  # an SVC's: the chosen C's mean ROC-AUC over the folds (fitting only; not exported)
    # [train + valid] out-of-fold outputs with that C (fit_svr(out_of_fold=True)): an SVR's values, a calibrated SVC's probabilities
    cv_predictions: np.ndarray | None = None

    @classmethod
    def from_fitted(cls, svr, bits: np.ndarray, C: float, platt: tuple[float, float] | None = None) -> "TanimotoSVR":
        """The closed form of a scikit-learn SVR (SVC) (kernel="precomputed") fitted on tanimoto(bits, bits)."""
        return cls(bits[svr.support_], svr.dual_coef_[0].astype(np.float64), float(svr.intercept_[0]), C, platt)

    def predict(self, bits: np.ndarray) -> np.ndarray:
        """float64 [n] predictions for [n, BITS] fingerprint bits: an SVR's values, a calibrated SVC's logits."""
        return platt_logit(tanimoto(bits, self.support) @ self.coef + self.intercept, self.platt)


def pooled(x: dict) -> np.ndarray:
    """The train and validation rows of a split dict (valid where there is one), in that order:
    what an SVR is chosen and fitted on."""
    return np.concatenate([x[split] for split in ("train", "valid") if split in x])


def selection(classifier: bool) -> str:
    return SELECTION_CLASSIFIER if classifier else SELECTION


def search_c(kernel: np.ndarray, y: np.ndarray, classifier: bool = False):
    """scikit-learn's GridSearchCV of a precomputed-kernel SVR (SVC) over SVR_C (selection), refitted
    on all rows; its best_score_ is minus the mean fold RMSE (the mean fold ROC-AUC; ties: the first C)."""
    from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
    from sklearn.svm import SVC, SVR

    if classifier:
        folds = StratifiedKFold(FOLDS, shuffle=True, random_state=FOLD_SEED)
        return GridSearchCV(SVC(kernel="precomputed"), {"C": list(SVR_C)}, cv=folds, scoring="roc_auc").fit(kernel, y)
    folds = KFold(FOLDS, shuffle=True, random_state=FOLD_SEED)
    return GridSearchCV(SVR(kernel="precomputed"), {"C": list(SVR_C)}, cv=folds, scoring="neg_root_mean_squared_error").fit(kernel, y)


def fit_svr(x: dict, y: dict, out_of_fold: bool = False, classifier: bool = False) -> TanimotoSVR:
    """Tanimoto-kernel SVR (`classifier`: SVC with Platt's sigmoid, calibrate) on train ∪ valid, C
    chosen by cross-validation (selection); with `out_of_fold`, also each molecule's output (a
    classifier's: probability) by the chosen C fitted on the other folds."""
    bits, labels = pooled(x), pooled(y)
    kernel = tanimoto(bits, bits)
    search = search_c(kernel, labels, classifier)
    fitted, platt = calibrate(search, kernel, labels) if classifier else (search.best_estimator_, None)
    svr = TanimotoSVR.from_fitted(fitted, bits, float(search.best_params_["C"]), platt)
    folds = fold_predictions(search, kernel, labels, platt) if out_of_fold else None
    score = {"cv_rocauc": float(search.best_score_)} if classifier else {"cv_rmse": -float(search.best_score_)}
    return replace(svr, cv_predictions=folds, **score)


def calibrate(search, kernel: np.ndarray, y: np.ndarray) -> tuple[object, tuple[float, float]]:
    """(the chosen SVC refitted on all rows, Platt's (A, B)) of a search_c classifier: scikit-learn's
    CalibratedClassifierCV (method sigmoid, ensemble=False) fits the sigmoid on the out-of-fold
    decision values of the folds that chose C, then the SVC on all rows. One SVC and one sigmoid
    export as the SVR's closed form plus two numbers. SVC(probability=True) would fit its sigmoid on
    libsvm's own random folds instead, and its probabilities may rank molecules otherwise than its
    decision values (scikit-learn's documentation warns of both)."""
    from sklearn.base import clone
    from sklearn.calibration import CalibratedClassifierCV

    calibrated = CalibratedClassifierCV(clone(search.best_estimator_), method="sigmoid", cv=search.cv, ensemble=False).fit(kernel, y)
    (pair,) = calibrated.calibrated_classifiers_
    (sigmoid,) = pair.calibrators  # two classes: one calibrator, of class 1
    return pair.estimator, (float(sigmoid.a_), float(sigmoid.b_))


def fold_predictions(search, kernel: np.ndarray, y: np.ndarray, platt: tuple[float, float] | None = None) -> np.ndarray:
    """float64 [n] out-of-fold outputs of a search_c result's chosen SVR over the same folds; a
    classifier's (`platt`: its sigmoid) are probabilities: its out-of-fold decision values through
    the sigmoid, which was fitted on those same values (so they score its ranking, ROC-AUC, fairly,
    and its log loss a little favourably)."""
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_predict

    if platt is None:
        return cross_val_predict(clone(search.best_estimator_), kernel, y, cv=search.cv).astype(np.float64)
    decision = cross_val_predict(clone(search.best_estimator_), kernel, y, cv=search.cv, method="decision_function")
    return 1.0 / (1.0 + np.exp(-platt_logit(decision.astype(np.float64), platt)))


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
    from gtscale.experiments.sweep import summarize, write_sweep

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


def write_svr_export(out: Path, svr: TanimotoSVR, manifest: dict) -> Path:
    """The SVR as a gtscale export folder (models/export.py's format), which `gtscale predict` reads
    beside model exports: model.yaml names it (`name: ecfp-svr`, radius, bits, C), model.pt holds
    tensors only (the support fingerprints packed 8 bits a byte, the dual coefficients and the
    intercept, fp32 like every export), export.json the shards' task it predicts. A calibrated SVC
    is `name: ecfp-svc`, with Platt's (A, B) as tensor `platt` and task loss bce (EXPORT_TASKS):
    predict gives its probabilities."""
    import torch

    from gtscale.models.export import write_export

    state = {"support": torch.from_numpy(np.packbits(svr.support, axis=1)), "coef": torch.from_numpy(svr.coef),
             "intercept": torch.tensor([svr.intercept]), **platt_tensor(svr.platt)}
    classifier = svr.platt is not None
    config = {"name": SVC_EXPORT_NAME if classifier else SVR_EXPORT_NAME, "radius": RADIUS, "bits": BITS, "C": svr.C}
    meta = {"source": "gtscale baseline ecfp", "task": EXPORT_TASKS[classifier], "shards": {k: manifest[k] for k in ("dataset", "task") if k in manifest}}
    return write_export(out, state, config, meta)


def platt_tensor(platt: tuple[float, float] | None) -> dict:
    """model.pt's `platt` tensor [A, B] of a calibrated SVC; nothing for an SVR."""
    import torch

    return {} if platt is None else {"platt": torch.tensor(platt)}


def read_platt(state: dict, classifier: bool, where: str) -> tuple[float, float] | None:
    """Platt's (A, B) of an SVC export's model.pt (`where`), None for an SVR's; a UserError naming
    the file when the tensor is missing from an SVC, present in an SVR, or not two numbers."""
    if classifier != ("platt" in state):
        raise UserError(f"{where}: {'lacks' if classifier else 'holds'} tensor platt, which an SVC export (and only an SVC export) holds: "
                        "Platt's sigmoid (A, B)")
    if not classifier:
        return None
    if state["platt"].shape != (2,):
        raise UserError(f"{where}: tensor platt has shape {tuple(state['platt'].shape)}; Platt's sigmoid is two numbers (A, B)")
    a, b = state["platt"].double().tolist()
    return a, b


@dataclass
class SVRExportConfig:
    """model.yaml of an ECFP + SVR (SVC) export (write_svr_export)."""

    name: Literal["ecfp-svr", "ecfp-svc"]
    radius: int  # of the Morgan fingerprints: RADIUS
    bits: int  # BITS
    C: float = ranged(low=0, low_open=True)  # the chosen regularisation (a record: prediction does not use it)


def read_svr_config(cls: type, config: dict, model_file: str):
    """An SVR export's model.yaml (beside `model_file`, its model.pt) as `cls`, fingerprinted
    ECFP4's way; a UserError naming the file and key."""
    config_file = Path(model_file).with_name("model.yaml")
    try:
        typed = from_dict(cls, config)
    except UserError as err:
        raise UserError(f"{config_file}: {err}") from None
    if (typed.radius, typed.bits) != (RADIUS, BITS):
        raise UserError(f"{config_file}: radius {typed.radius}, bits {typed.bits}: an SVR export reads ECFP4 (radius {RADIUS}, {BITS} bits)")
    return typed


def read_svr_export(config: dict, state: dict, where: str) -> TanimotoSVR:
    """The TanimotoSVR of an export written by write_svr_export (its model.yaml and model.pt, read
    and checked by models/export.read_export: every tensor finite); a UserError naming the file
    and key if they do not fit. `where`: the export's model.pt."""
    import torch

    typed = read_svr_config(SVRExportConfig, config, where)
    platt = read_platt(state, typed.name == SVC_EXPORT_NAME, where)
    if set(state) - {"platt"} != {"support", "coef", "intercept"}:
        raise UserError(f"{where}: holds tensors {', '.join(sorted(state))}; an ECFP4 + SVR export holds support, coef and intercept "
                        "(an SVC's also platt)")
    support, coef = state["support"], state["coef"]
    if support.dtype != torch.uint8 or support.ndim != 2 or support.shape[1] * 8 != BITS or coef.shape != (support.shape[0],) or state["intercept"].numel() != 1:
        raise UserError(f"{where}: its support {tuple(support.shape)} and coef {tuple(coef.shape)} do not fit a {BITS}-bit SVR")
    return TanimotoSVR(np.unpackbits(support.numpy(), axis=1), coef.double().numpy(), float(state["intercept"].double()), typed.C, platt)
