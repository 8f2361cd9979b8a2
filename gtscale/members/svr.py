"""The ECFP4 + Tanimoto SVR member (the MoleculeACE paper's SVM) and, on a classification task, its
calibrated SVC: fitted in closed form, written as an export folder, read back as one.

The SVR (SVC) is chosen the MoleculeACE paper's way: C by 5-fold cross-validation over the train
and validation molecules together, then one fit on all of them (SELECTION; the kernel SVR of
kernel_svr.py does the same; a classifier's folds keep the classes' proportions and score ROC-AUC;
the SVC then gets Platt's sigmoid, calibrate, which makes its scores calibrated probabilities).
Its export (write_svr_export) is what `gtscale predict` reads beside model exports (an SVC's
predicts probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from gtscale.config import from_dict, ranged
from gtscale.errors import UserError
from gtscale.members.fingerprints import BITS, RADIUS, tanimoto
from gtscale.train.outputs import outputs

SVR_C = (0.1, 1.0, 10.0, 100.0)
#: How an SVR's hyperparameters are chosen (recorded in its sweep row: a cached row of another
#: protocol is fitted again): scikit-learn's GridSearchCV over these folds of train ∪ valid,
#: shuffled with this seed, scored by RMSE, refitted on all of train ∪ valid. An SVC's folds are
#: stratified by class and score ROC-AUC.
FOLDS, FOLD_SEED = 5, 0
SELECTION = f"{FOLDS}-fold CV on train+valid, refit on train+valid"
SELECTION_CLASSIFIER = f"{FOLDS}-fold stratified CV (ROC-AUC) on train+valid, refit on train+valid"
#: What names an SVR export and a calibrated SVC's (model.yaml `name`).
SVR_EXPORT_NAME, SVC_EXPORT_NAME = "ecfp-svr", "ecfp-svc"
#: export.json `task` of an SVR's export and of a calibrated SVC's (bce: predict turns its logits into
#: probabilities, train/outputs.py; ogbg-molhiv: the evaluator of one binary target by ROC-AUC).
EXPORT_TASKS = {False: {"loss": "mse", "metric": "rmse", "evaluator": "regression"},
                True: {"loss": "bce", "metric": "rocauc", "evaluator": "ogbg-molhiv"}}


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
    return outputs(platt_logit(decision.astype(np.float64), platt), EXPORT_TASKS[True]["loss"], np.float64)


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
