"""The kernel SVR's kernel on m landmark molecules (Nyström), with ridge regression on the features
it gives: a kernel model linear in molecules, one kernel for every target column.

    k(a, b) = (S(a, b) + w · exp(−γ ‖z_a − z_b‖²)) / (1 + w)         the kernel SVR's (kernel_svr.py)
    K_LL = U Λ Uᵀ                                                     the kernel among the landmarks L
    Φ(x) = k(x, L) · U Λ^{−1/2}                                       Φ(a) · Φ(b) = k(a, L) K_LL⁺ k(L, b) ≈ k(a, b)
    β_t, b_t = argmin Σ_i (y_it − Φ(x_i) · β − b)² + α_t ‖β‖²         ridge, on the molecules labelled for t
    f_t(x) = Φ(x) · β_t + b_t = k(x, L) · c_t + b_t,   c_t = U Λ^{−1/2} β_t

Ridge on Φ is kernel ridge regression on the kernel ΦΦᵀ, which equals k wherever one side is a
landmark (exactly k when every fitted molecule is one: n ≤ m). f_t is a closed form over the
landmarks, as the kernel SVR's is over its support molecules, and that is what the export keeps.

Cost: m kernel values a molecule, O(n·m²) time per target column; memory O(T·m²), whatever n is:
the final fit streams the molecules in chunks and keeps only the sums ridge needs (Σ Φ, Σ y,
Σ Φ y, Σ Φ Φᵀ of the labelled molecules of each target).

Choosing: S and w once for all targets (one kernel, so one kernel evaluation a molecule at
prediction time), by the mean over targets of each target's best cross-validated score (RMSE over
the target's standard deviation, or ROC-AUC); α per target. Cross-validation runs on at most
SEARCH molecules drawn from those fitted: the grid costs the same at 4 k molecules as at 400 k.
A classification's ridge fits the 0/1 labels (a least-squares classifier), ROC-AUC chooses, and
Platt's sigmoid fitted on the out-of-fold decision values turns them into probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import numpy as np

from gtscale.config import ranged
from gtscale.errors import UserError
from gtscale.members.fingerprints import BITS, RADIUS
from gtscale.members.kernel_svr import SIMILARITIES, WEIGHTS, combined, fingerprint_similarity, rbf, squared_distances
from gtscale.members.svr import EXPORT_TASKS, FOLD_SEED, FOLDS, read_svr_config

#: m: landmark molecules (docs/results/fit-scaling.md measures m against the exact kernel SVR).
LANDMARKS = 1024
#: Most molecules the cross-validation of (S, w, α) runs on, and the landmarks (S, w) is chosen with.
SEARCH, SEARCH_LANDMARKS = 5000, 256
#: The ridge penalties α tried, on the kernel's scale (kernel ridge regression's λ).
ALPHAS = tuple(float(10.0 ** e) for e in np.arange(-3.0, 2.01, 0.5))
#: Molecules a chunk: a chunk's kernel rows and features are what the final fit holds at once.
CHUNK = 4096
#: Eigenvalues of K_LL below this share of the largest are dropped (duplicate or near-duplicate landmarks).
EIGEN_FLOOR = 1e-9


@dataclass(frozen=True)
class LandmarkKernel:
    """k(x, L): the kernel of molecules with the landmarks, and the map U Λ^{−1/2} to features."""

    counts: np.ndarray  # [m, BITS] uint8 ECFP4 counts of the landmarks
    z: np.ndarray  # [m, d] their standardised representations
    z_mean: np.ndarray  # [d] statistics of the fitted molecules that standardise z
    z_std: np.ndarray
    similarity: str  # S
    weight: float  # w
    gamma: float  # γ

    def __call__(self, counts: np.ndarray, z: np.ndarray) -> np.ndarray:
        """[n, m] kernel of molecules (ECFP4 counts, raw representation z) with the landmarks."""
        return combined(counts, (z - self.z_mean) / self.z_std, self.counts, self.z, self.weight, self.gamma, self.similarity)

    def feature_map(self) -> np.ndarray:
        """U Λ^{−1/2} [m, k] of K_LL, its k eigenvalues above EIGEN_FLOOR of the largest."""
        return feature_map(combined(self.counts, self.z, self.counts, self.z, self.weight, self.gamma, self.similarity))


def feature_map(k_ll: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh((k_ll + k_ll.T) / 2.0)
    keep = values > EIGEN_FLOOR * values[-1]
    return vectors[:, keep] / np.sqrt(values[keep])


@dataclass(frozen=True)
class LandmarkModel:
    """A fitted landmark kernel model of T targets: f_t(x) = k(x, L) · coef[:, t] + intercept[t]."""

    kernel: LandmarkKernel
    coef: np.ndarray  # [m, T] float64
    intercept: np.ndarray  # [T]
    alpha: np.ndarray  # [T] the ridge penalty chosen for each target
    platt: np.ndarray | None = None  # a classifier's [T, 2] sigmoids (A, B) (ecfp.platt_logit); None for a regression
    cv_score: np.ndarray | None = None  # [T] the chosen candidate's cross-validated RMSE (ROC-AUC) per target (fitting only)

    def predict(self, counts: np.ndarray, z: np.ndarray) -> np.ndarray:
        """[n, T]: a regression's values, a classifier's logits (Platt's sigmoid of each target)."""
        out = np.empty((len(counts), self.coef.shape[1]))
        for rows in chunks(len(counts)):
            out[rows] = self.kernel(counts[rows], z[rows]) @ self.coef + self.intercept
        return out if self.platt is None else -(self.platt[:, 0] * out + self.platt[:, 1])

    def record(self) -> dict:
        """What was chosen for it, as a report records it."""
        return {"similarity": self.kernel.similarity, "weight": self.kernel.weight, "gamma": self.kernel.gamma, "landmarks": len(self.kernel.counts),
                "alpha": [float(a) for a in self.alpha]}

    def choice(self) -> "Choice":
        """What was chosen for it: fit_landmark(…, choice=) fits the same on other molecules."""
        return Choice(self.kernel.similarity, self.kernel.weight, self.alpha, self.cv_score, self.platt)


@dataclass(frozen=True)
class Choice:
    """What cross-validation chose: S and w for all targets, α per target, and each target's score."""

    similarity: str
    weight: float
    alpha: np.ndarray  # [T]
    score: np.ndarray  # [T] cross-validated RMSE (regression) or ROC-AUC (classification) at that choice
    platt: np.ndarray | None  # [T, 2] a classifier's sigmoids, fitted on the out-of-fold decision values


def chunks(n: int) -> Iterator[slice]:
    """The rows of n molecules, CHUNK at a time."""
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def fit_landmark(counts: np.ndarray, z: np.ndarray, y: np.ndarray, classifier: bool = False, *, landmarks: int = LANDMARKS,
                 search: int = SEARCH, choice: Choice | None = None, seed: int = 0) -> LandmarkModel:
    """The model of every target column of y [n, T] (NaN: not labelled) on the molecules' ECFP4
    counts [n, BITS] and representations z [n, d]: landmarks drawn from them (all of them when
    n ≤ `landmarks`), (S, w, α) chosen by cross-validation (module docstring) unless `choice`
    gives them (a refit on more molecules), then ridge on every molecule labelled for each target."""
    y = np.asarray(y, np.float64).reshape(len(counts), -1)
    rng = np.random.default_rng(seed)
    z_mean, z_std = z.mean(0), z.std(0) + 1e-6
    pick = np.sort(rng.choice(len(counts), min(landmarks, len(counts)), replace=False))
    z_l = (z[pick] - z_mean) / z_std
    distances = squared_distances(z_l, z_l)[np.triu_indices(len(pick), 1)]
    gamma = 1.0 / float(np.median(distances)) if len(distances) and np.median(distances) > 0 else 1.0
    base = LandmarkKernel(counts[pick], z_l, z_mean, z_std, SIMILARITIES[0], 0.0, gamma)
    if choice is None:
        choice = choose(base, counts, z, y, classifier, search, rng)
    kernel = LandmarkKernel(base.counts, base.z, z_mean, z_std, choice.similarity, choice.weight, gamma)
    projection = kernel.feature_map()
    sums = RidgeSums(projection.shape[1], y.shape[1])
    for rows in chunks(len(counts)):
        sums.add(kernel(counts[rows], z[rows]) @ projection, y[rows])
    beta, intercept = sums.solve(choice.alpha)
    return LandmarkModel(kernel, projection @ beta, intercept, choice.alpha, choice.platt, choice.score)


def choose(base: LandmarkKernel, counts: np.ndarray, z: np.ndarray, y: np.ndarray, classifier: bool, search: int,
           rng: np.random.Generator) -> Choice:
    """(S, w) and α per target by FOLDS-fold cross-validation on at most `search` molecules labelled
    for any target: (S, w) on the first SEARCH_LANDMARKS landmarks, every α at each (an
    eigendecomposition a fold and target, whose cost grows as m³), then α on all of them."""
    labelled = np.flatnonzero(np.isfinite(y).any(1))
    rows = np.sort(rng.choice(labelled, min(search, len(labelled)), replace=False))
    fold = np.random.default_rng(FOLD_SEED).permutation(len(rows)) % FOLDS
    zs, y_rows = (z[rows] - base.z_mean) / base.z_std, y[rows]
    stds = np.array([float(np.nanstd(y_rows[:, t])) or 1.0 for t in range(y.shape[1])])  # makes the targets' RMSEs comparable

    kernels: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}  # (S, m) → (S among the landmarks, S of rows with them)

    def candidate(similarity: str, weight: float, m: int) -> tuple[float, np.ndarray, np.ndarray]:
        """(the mean over targets of each one's best score, [T, A] scores, [n, T, A] out-of-fold outputs)."""
        landmarks, z_l = base.counts[:m], base.z[:m]
        if (similarity, m) not in kernels:
            kernels[similarity, m] = (fingerprint_similarity(similarity, landmarks, landmarks), fingerprint_similarity(similarity, counts[rows], landmarks))
        s_ll, s_sl = kernels[similarity, m]
        k_ll = (s_ll + weight * rbf(z_l, z_l, base.gamma)) / (1.0 + weight)
        k_sl = (s_sl + weight * rbf(zs, z_l, base.gamma)) / (1.0 + weight)
        out_of_fold = cross_validate(k_sl @ feature_map(k_ll), y_rows, fold)
        scores = np.stack([score_alphas(out_of_fold[:, t], y_rows[:, t], classifier) for t in range(y.shape[1])])
        return float(np.mean(scores.max(1) / (1.0 if classifier else stds))), scores, out_of_fold

    few = min(SEARCH_LANDMARKS, len(base.counts))
    tried = {(similarity, weight): candidate(similarity, weight, few) for similarity in SIMILARITIES for weight in WEIGHTS}
    similarity, weight = max(tried, key=lambda sw: tried[sw][0])  # max keeps the first of equals
    _, scores, out_of_fold = tried[similarity, weight] if few == len(base.counts) else candidate(similarity, weight, len(base.counts))
    at = np.argmax(scores, 1)  # the first of equals: the smallest α
    targets = np.arange(len(at))
    decision = out_of_fold[:, targets, at]  # [n, T]
    platt = np.stack([platt_sigmoid(decision[:, t], y_rows[:, t]) for t in targets]) if classifier else None
    chosen = scores[targets, at]
    return Choice(similarity, weight, np.array([ALPHAS[a] for a in at]), chosen if classifier else -chosen, platt)


def cross_validate(phi: np.ndarray, y: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """[n, T, A] out-of-fold ridge predictions of every target for every α of ALPHAS (NaN where a
    molecule is not labelled); each fold's training sums are the whole's less the fold's."""
    out = np.full((*y.shape, len(ALPHAS)), np.nan)
    total = RidgeSums(phi.shape[1], y.shape[1])
    parts = []
    for f in range(FOLDS):
        part = RidgeSums(phi.shape[1], y.shape[1])
        part.add(phi[fold == f], y[fold == f])
        parts.append(part)
        total.merge(part)
    for f, part in enumerate(parts):
        held = fold == f
        beta, intercept = total.minus(part).solve_all(np.asarray(ALPHAS))  # [T, k, A], [T, A]
        for t in range(y.shape[1]):
            rows = held & np.isfinite(y[:, t])
            out[rows, t] = phi[rows] @ beta[t] + intercept[t]
    return out


class RidgeSums:
    """The sums ridge needs of each target's labelled molecules: n, Σ φ, Σ y, Σ φ y, Σ φ φᵀ."""

    def __init__(self, k: int, targets: int):
        self.n = np.zeros(targets)
        self.phi = np.zeros((targets, k))
        self.y = np.zeros(targets)
        self.phi_y = np.zeros((targets, k))
        self.gram = np.zeros((targets, k, k))

    def add(self, phi: np.ndarray, y: np.ndarray) -> None:
        """Add molecules' features [n, k] and targets [n, T]: Σ φ φᵀ, the costly sum (n · k² a
        target), once for every set of targets labelled on the same molecules."""
        labelled = np.isfinite(y)
        masks, group = np.unique(labelled, axis=1, return_inverse=True)
        for g in range(masks.shape[1]):
            p = phi[masks[:, g]]
            gram, total = p.T @ p, p.sum(0)
            for t in np.flatnonzero(group.reshape(-1) == g):
                v = y[masks[:, g], t]
                self.n[t] += len(v)
                self.phi[t] += total
                self.y[t] += v.sum()
                self.phi_y[t] += v @ p
                self.gram[t] += gram

    def merge(self, other: "RidgeSums") -> None:
        for name in ("n", "phi", "y", "phi_y", "gram"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def minus(self, other: "RidgeSums") -> "RidgeSums":
        out = RidgeSums(self.phi.shape[1], len(self.n))
        for name in ("n", "phi", "y", "phi_y", "gram"):
            setattr(out, name, getattr(self, name) - getattr(other, name))
        return out

    def centred(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(Σ (φ − μ)(φ − μ)ᵀ, Σ (φ − μ)(y − ȳ), μ, ȳ) of target t."""
        n = max(self.n[t], 1.0)
        mu, mean_y = self.phi[t] / n, self.y[t] / n
        return self.gram[t] - n * np.outer(mu, mu), self.phi_y[t] - n * mu * mean_y, mu, mean_y

    def solve_all(self, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([T, k, A] β, [T, A] b) for every α: one eigendecomposition a target."""
        k = self.phi.shape[1]
        beta, intercept = np.zeros((len(self.n), k, len(alphas))), np.zeros((len(self.n), len(alphas)))
        for t in range(len(self.n)):
            gram, cross, mu, mean_y = self.centred(t)
            values, vectors = np.linalg.eigh(gram)
            beta[t] = vectors @ ((vectors.T @ cross)[:, None] / (np.maximum(values, 0.0)[:, None] + alphas[None, :]))
            intercept[t] = mean_y - mu @ beta[t]
        return beta, intercept

    def solve(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([k, T] β, [T] b) with target t's penalty alpha[t]."""
        k = self.phi.shape[1]
        beta, intercept = np.zeros((k, len(self.n))), np.zeros(len(self.n))
        for t in range(len(self.n)):
            gram, cross, mu, mean_y = self.centred(t)
            beta[:, t] = np.linalg.solve(gram + alpha[t] * np.eye(k), cross)
            intercept[t] = mean_y - mu @ beta[:, t]
        return beta, intercept


def score_alphas(out_of_fold: np.ndarray, y: np.ndarray, classifier: bool) -> np.ndarray:
    """[A] higher is better: minus the RMSE of each α's out-of-fold predictions, or their ROC-AUC."""
    labelled = np.isfinite(y)
    pred, truth = out_of_fold[labelled], y[labelled]
    if not classifier:
        return -np.sqrt(np.mean((pred - truth[:, None]) ** 2, axis=0))
    from sklearn.metrics import roc_auc_score

    return np.array([roc_auc_score(truth, pred[:, a]) for a in range(pred.shape[1])])


def platt_sigmoid(decision: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Platt's (A, B), P(1) = 1 / (1 + exp(A·f + B)), fitted on decision values f of labelled molecules."""
    from sklearn.linear_model import LogisticRegression

    labelled = np.isfinite(y)
    fitted = LogisticRegression(C=1e6).fit(decision[labelled, None], y[labelled])
    return np.array([-float(fitted.coef_[0, 0]), -float(fitted.intercept_[0])])


#: What names a landmark kernel export (model.yaml `name`): ridge's values, or a classifier's
#: probabilities (Platt's sigmoid of each target; task loss bce).
LANDMARK_EXPORT_NAME, LANDMARK_CLASSIFIER_EXPORT_NAME = "landmark-ridge", "landmark-classifier"
LANDMARK_TENSORS = ("landmarks", "z", "coef", "intercept", "z_mean", "z_std")


def write_landmark_export(out: Path, model: LandmarkModel, backbone, manifest: dict) -> Path:
    """The model and its backbone (a models/export.Export) as one export folder, laid out as the
    kernel SVR's (kernel_svr.write_kernel_export) with the landmarks as its support molecules and
    one column of coef (and one intercept, alpha, Platt pair) per target; model.yaml `outputs`
    counts the targets, which manifest's task names."""
    import torch

    from gtscale.models.export import write_export

    kernel, classifier = model.kernel, model.platt is not None
    landmarks = np.packbits(kernel.counts > 0, axis=1) if kernel.similarity == "tanimoto" else kernel.counts
    state = {"landmarks": torch.from_numpy(np.ascontiguousarray(landmarks)), "z": torch.from_numpy(kernel.z), "coef": torch.from_numpy(model.coef),
             "intercept": torch.from_numpy(model.intercept), "z_mean": torch.from_numpy(kernel.z_mean), "z_std": torch.from_numpy(kernel.z_std),
             **({"platt": torch.from_numpy(model.platt)} if classifier else {}), **{f"backbone.{k}": v for k, v in backbone.state.items()}}
    config = {"name": LANDMARK_CLASSIFIER_EXPORT_NAME if classifier else LANDMARK_EXPORT_NAME, "radius": RADIUS, "bits": BITS,
              "outputs": int(model.coef.shape[1]), "similarity": kernel.similarity, "weight": kernel.weight, "gamma": kernel.gamma,
              "alpha": [float(a) for a in model.alpha], "backbone": backbone.config}
    meta = {"source": "gtscale fit", "task": EXPORT_TASKS[classifier], "shards": {k: manifest[k] for k in ("dataset", "task") if k in manifest},
            "backbone": {k: backbone.meta[k] for k in ("task", "shards") if k in backbone.meta}}
    return write_export(out, state, config, meta)


@dataclass
class LandmarkExportConfig:
    """model.yaml of a landmark kernel export (write_landmark_export); its backbone config is
    checked with every export's model config (models/export.check_export)."""

    name: Literal["landmark-ridge", "landmark-classifier"]
    radius: int  # of the Morgan fingerprints: ecfp.RADIUS
    bits: int  # ecfp.BITS
    backbone: dict
    outputs: int = ranged(low=1)  # T, the targets
    weight: float = ranged(low=0)  # w of the representation kernel
    gamma: float = ranged(low=0, low_open=True)  # γ of the RBF
    similarity: Literal["tanimoto", "minmax"] = "tanimoto"  # S
    alpha: list[float] = ranged(default_factory=list, low=0, low_open=True)  # each target's ridge penalty (a record: prediction does not use it)


def read_landmark_export(config: dict, state: dict, where: str) -> tuple[LandmarkModel, dict]:
    """(the LandmarkModel, the backbone's tensors) of an export write_landmark_export wrote (read and
    checked by models/export.read_export: every tensor finite, the backbone's config); a UserError
    naming the file and key if they do not fit. `where`: the export's model.pt."""
    import torch

    typed = read_svr_config(LandmarkExportConfig, config, where)
    classifier, outputs = typed.name == LANDMARK_CLASSIFIER_EXPORT_NAME, typed.outputs
    missing = [k for k in LANDMARK_TENSORS if k not in state]
    if missing:
        raise UserError(f"{where}: lacks tensor(s) {', '.join(missing)} of a landmark kernel export ({', '.join(LANDMARK_TENSORS)})")
    if classifier != ("platt" in state):
        raise UserError(f"{where}: {'lacks' if classifier else 'holds'} tensor platt, which a landmark classifier (and only one) holds")
    landmarks, z, coef = state["landmarks"], state["z"], state["coef"]
    m = landmarks.shape[0] if landmarks.ndim == 2 else -1
    width = BITS // 8 if typed.similarity == "tanimoto" else BITS  # packed bits, or counts
    if landmarks.dtype != torch.uint8 or landmarks.shape[1:] != (width,) or z.ndim != 2 or z.shape[0] != m or coef.shape != (m, outputs) \
            or state["z_mean"].shape != z.shape[1:] or state["z_std"].shape != z.shape[1:] or state["intercept"].shape != (outputs,) \
            or (classifier and state["platt"].shape != (outputs, 2)) or len(typed.alpha) != outputs:
        raise UserError(f"{where}: its landmarks {tuple(landmarks.shape)}, z {tuple(z.shape)} and coef {tuple(coef.shape)} do not fit "
                        f"one landmark kernel model of {outputs} target(s)")
    if not (state["z_std"] > 0).all():
        raise UserError(f"{where}: tensor z_std must be positive (it divides each representation dimension)")
    counts = np.unpackbits(landmarks.numpy(), axis=1) if typed.similarity == "tanimoto" else landmarks.numpy()
    kernel = LandmarkKernel(counts, z.double().numpy(), state["z_mean"].double().numpy(), state["z_std"].double().numpy(), typed.similarity,
                            typed.weight, typed.gamma)
    platt = state["platt"].double().numpy() if classifier else None
    model = LandmarkModel(kernel, coef.double().numpy(), state["intercept"].double().numpy(), np.array(typed.alpha), platt)
    return model, {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
