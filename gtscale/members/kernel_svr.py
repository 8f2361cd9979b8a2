"""An SVR on two kernels, a fingerprint similarity S of ECFP4 and an RBF kernel on what a
pretrained gtscale model makes of each molecule, and its export: the kernel member `gtscale fit`
and `gtscale baseline kernel` fit, which `gtscale predict` reads.

    k(a, b) = (S(ecfp_a, ecfp_b) + w · exp(-γ ‖z_a − z_b‖²)) / (1 + w)

S is the Tanimoto similarity of the ECFP4 bits (the MoleculeACE paper's SVM) or the MinMax
similarity of their counts (how often each bit is hit; fingerprints.minmax, Tanimoto's on bits).
z is the export's pooled graph representation (the input of its task head, inference.graph_representation),
featurised as the export's own shards were, standardised per dimension with the fitted molecules'
mean and std; γ = 1 / the median squared distance between them (the median heuristic, fixed, not
tuned). The backbone stays frozen: nothing of it is trained on the set, so a set of a few hundred
molecules fits only the SVR's dual coefficients. S, w (Tanimoto with w = 0 is the plain ECFP4 SVR)
and C are chosen together the way the ECFP SVR chooses C (svr.selection: 5-fold
cross-validation over train ∪ valid, then one fit on all of them: the fitted molecules above). On
a classification task the same kernel feeds an SVC, chosen by ROC-AUC, with Platt's sigmoid fitted
on its out-of-fold decision values (svr.calibrate): its logits become probabilities.

The export (model.yaml `name: kernel-svr`; a calibrated SVC's `kernel-svc`, with tensor `platt` and
task loss bce, as svr.write_svr_export; `similarity` names S, Tanimoto where it is absent) carries
the backbone it reads: model.pt holds the backbone export's tensors under `backbone.` beside the
SVR's (the support molecules' ECFP4, Tanimoto's as packed bits, MinMax's as uint8 counts; their
standardised representations, dual coefficients, intercept, the statistics that standardise z),
model.yaml the backbone's config under `backbone`, export.json the backbone's task and shards
record (how its molecules are featurised) under `backbone`. Tensors only, like every export.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from gtscale.config import ranged
from gtscale.errors import UserError
from gtscale.members.fingerprints import BITS, RADIUS, minmax, tanimoto
from gtscale.members.svr import (EXPORT_TASKS, calibrate, fold_predictions, platt_logit, platt_tensor, pooled, read_platt, read_svr_config,
                                 search_c)

#: The fingerprint similarities S tried, each on the molecules' ECFP4 counts (Tanimoto reads their
#: bits, the counts that are not 0); ties go to the first.
SIMILARITIES = ("tanimoto", "minmax")
#: The weights of the representation kernel tried (with every S and every C of the ECFP baseline).
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
#: What names a kernel SVR export and a calibrated kernel SVC's (model.yaml `name`).
KERNEL_EXPORT_NAME, KERNEL_SVC_EXPORT_NAME = "kernel-svr", "kernel-svc"
SVR_TENSORS = ("support", "z", "coef", "intercept", "z_mean", "z_std")


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


def rbf(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    with np.errstate(over="ignore"):  # a huge γ: −γ‖a − b‖² is −inf, and the kernel 0, as it should be
        return np.exp(-gamma * squared_distances(a, b))


@dataclass(frozen=True)
class KernelSVR:
    """A fitted SVR on the combined kernel, in closed form over its support molecules (scikit-learn's
    precomputed-kernel SVR, its dual solution kept): f(x) = Σ_i coef_i · k(x, s_i) + intercept."""

    counts: np.ndarray  # [m, BITS] uint8 ECFP4 counts of the support molecules (a Tanimoto SVR's export keeps their bits)
    z: np.ndarray  # [m, d] their standardised representations
    coef: np.ndarray  # [m] float64 dual coefficients
    intercept: float
    C: float
    weight: float  # w
    gamma: float  # γ
    z_mean: np.ndarray  # [d] statistics of the fitted molecules that standardise z
    z_std: np.ndarray
    platt: tuple[float, float] | None = None  # a calibrated SVC's sigmoid (A, B) (svr.platt_logit); None for an SVR
    similarity: Literal["tanimoto", "minmax"] = "tanimoto"  # S
    cv_rmse: float = float("nan")  # the chosen (S, w, C)'s mean RMSE over the cross-validation folds (fitting only; not exported)
    cv_rocauc: float = float("nan")  # a classifier's: the chosen (S, w, C)'s mean ROC-AUC over the folds (fitting only; not exported)
    # [train + valid] out-of-fold outputs with that (S, w, C) (out_of_fold=True): an SVR's values, a calibrated SVC's probabilities
    cv_predictions: np.ndarray | None = None

    def kernel(self, counts: np.ndarray, z: np.ndarray) -> np.ndarray:
        """[n, m] kernel of molecules (ECFP4 counts, raw representation z) with the support molecules."""
        return combined(counts, (z - self.z_mean) / self.z_std, self.counts, self.z, self.weight, self.gamma, self.similarity)

    def predict(self, counts: np.ndarray, z: np.ndarray) -> np.ndarray:
        """An SVR's values, a calibrated SVC's logits."""
        return platt_logit(self.kernel(counts, z) @ self.coef + self.intercept, self.platt)


def fingerprint_similarity(name: str, counts_a: np.ndarray, counts_b: np.ndarray) -> np.ndarray:
    """S of every row of counts_a with every row of counts_b (ECFP4 counts)."""
    return tanimoto(counts_a > 0, counts_b > 0) if name == "tanimoto" else minmax(counts_a, counts_b)


def combined(counts_a, z_a, counts_b, z_b, weight: float, gamma: float, similarity: str = "tanimoto") -> np.ndarray:
    return (fingerprint_similarity(similarity, counts_a, counts_b) + weight * rbf(z_a, z_b, gamma)) / (1.0 + weight)


def fit_kernel_svr(counts: dict, z: dict, y: dict, out_of_fold: bool = False, classifier: bool = False) -> KernelSVR:
    """The SVR (`classifier`: SVC with Platt's sigmoid, svr.calibrate) on train ∪ valid, (S, w, C)
    chosen by cross-validation like the ECFP SVR's C (svr.selection; ties: the first of
    SIMILARITIES × WEIGHTS × SVR_C); z standardised and γ set on the same molecules. `counts`: ECFP4
    counts (fingerprints.ecfp_rows). With `out_of_fold`, also each molecule's output (a classifier's:
    probability) by the chosen (S, w, C) fitted on the other folds."""
    counts, z, y = pooled(counts), pooled(z), pooled(y)
    mean, std = z.mean(0), z.std(0) + 1e-6
    zs = (z - mean) / std
    sq = squared_distances(zs, zs)
    gamma = 1.0 / float(np.median(sq[np.triu_indices(len(sq), 1)]))
    near = np.exp(-gamma * sq)
    searches = []
    for similarity in SIMILARITIES:
        fingerprints = fingerprint_similarity(similarity, counts, counts)
        searches += [(similarity, weight, search_c((fingerprints + weight * near) / (1.0 + weight), y, classifier)) for weight in WEIGHTS]
    similarity, weight, search = max(searches, key=lambda sws: sws[2].best_score_)  # max keeps the first of equals
    kernel = (fingerprint_similarity(similarity, counts, counts) + weight * near) / (1.0 + weight)
    svr, platt = calibrate(search, kernel, y) if classifier else (search.best_estimator_, None)
    folds = fold_predictions(search, kernel, y, platt) if out_of_fold else None
    return KernelSVR(counts[svr.support_], zs[svr.support_], svr.dual_coef_[0].astype(np.float64), float(svr.intercept_[0]),
                     float(search.best_params_["C"]), weight, gamma, mean, std, platt, similarity, cv_predictions=folds,
                     **({"cv_rocauc": float(search.best_score_)} if classifier else {"cv_rmse": -float(search.best_score_)}))


def write_kernel_export(out: Path, svr: KernelSVR, backbone, manifest: dict) -> Path:
    """The SVR and its backbone (a models/export.Export) as one export folder (module docstring)."""
    import torch

    from gtscale.models.export import write_export

    support = np.packbits(svr.counts > 0, axis=1) if svr.similarity == "tanimoto" else svr.counts
    state = {"support": torch.from_numpy(np.ascontiguousarray(support)), "z": torch.from_numpy(svr.z), "coef": torch.from_numpy(svr.coef),
             "intercept": torch.tensor([svr.intercept]), "z_mean": torch.from_numpy(svr.z_mean), "z_std": torch.from_numpy(svr.z_std),
             **platt_tensor(svr.platt), **{f"backbone.{k}": v for k, v in backbone.state.items()}}
    classifier = svr.platt is not None
    config = {"name": KERNEL_SVC_EXPORT_NAME if classifier else KERNEL_EXPORT_NAME, "radius": RADIUS, "bits": BITS, "C": svr.C,
              "similarity": svr.similarity, "weight": svr.weight, "gamma": svr.gamma, "backbone": backbone.config}
    meta = {"source": "gtscale baseline kernel", "task": EXPORT_TASKS[classifier],
            "shards": {k: manifest[k] for k in ("dataset", "task") if k in manifest},
            "backbone": {k: backbone.meta[k] for k in ("task", "shards") if k in backbone.meta}}
    return write_export(out, state, config, meta)


@dataclass
class KernelExportConfig:
    """model.yaml of a kernel SVR (SVC) export (write_kernel_export); its backbone config is checked
    with every export's model config (models/export.check_export)."""

    name: Literal["kernel-svr", "kernel-svc"]
    radius: int  # of the Morgan fingerprints: fingerprints.RADIUS
    bits: int  # fingerprints.BITS
    backbone: dict
    C: float = ranged(low=0, low_open=True)
    weight: float = ranged(low=0)  # w of the representation kernel
    gamma: float = ranged(low=0, low_open=True)  # γ of the RBF
    similarity: Literal["tanimoto", "minmax"] = "tanimoto"  # S (an export written before MinMax was offered has Tanimoto's)


def read_kernel_export(config: dict, state: dict, where: str) -> tuple[KernelSVR, dict]:
    """(the KernelSVR, the backbone's tensors) of an export write_kernel_export wrote (read and
    checked by models/export.read_export: every tensor finite, the backbone's config); a
    UserError naming the file and key if they do not fit. `where`: the export's model.pt."""
    import torch

    typed = read_svr_config(KernelExportConfig, config, where)
    platt = read_platt(state, typed.name == KERNEL_SVC_EXPORT_NAME, where)
    missing = [k for k in SVR_TENSORS if k not in state]
    if missing:
        raise UserError(f"{where}: lacks tensor(s) {', '.join(missing)} of a kernel SVR export ({', '.join(SVR_TENSORS)})")
    support, z, coef = state["support"], state["z"], state["coef"]
    m = support.shape[0] if support.ndim == 2 else -1
    width = BITS // 8 if typed.similarity == "tanimoto" else BITS  # packed bits, or counts
    if support.dtype != torch.uint8 or support.shape[1:] != (width,) or z.ndim != 2 or z.shape[0] != m or coef.shape != (m,) \
            or state["z_mean"].shape != z.shape[1:] or state["z_std"].shape != z.shape[1:] or state["intercept"].numel() != 1:
        raise UserError(f"{where}: its support {tuple(support.shape)}, z {tuple(z.shape)} and coef {tuple(coef.shape)} do not fit one kernel SVR")
    if not (state["z_std"] > 0).all():
        raise UserError(f"{where}: tensor z_std must be positive (it divides each representation dimension)")
    counts = np.unpackbits(support.numpy(), axis=1) if typed.similarity == "tanimoto" else support.numpy()
    svr = KernelSVR(counts, z.double().numpy(), coef.double().numpy(), float(state["intercept"].double()), typed.C, typed.weight, typed.gamma,
                    state["z_mean"].double().numpy(), state["z_std"].double().numpy(), platt, typed.similarity)
    return svr, {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
