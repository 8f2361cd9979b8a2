"""`gtscale baseline kernel SHARDS --backbone EXPORT --out DIR` runs this: the kernel SVR of
members/kernel_svr.py (an ECFP4 similarity, Tanimoto or MinMax, + an RBF kernel on a
pretrained export's graph representation, the backbone frozen) fitted on a graph-level shard
folder's train and validation molecules (experiments/baseline_set.py: any such folder, its
records' SMILES), its similarity, kernel weight and C chosen by cross-validation over them
(svr.selection), scored on the test split like
`gtscale baseline ecfp`: RMSE, MAE and MoleculeACE's cliff RMSE, or, on a classification task,
an SVC on the same kernel scored by ROC-AUC.

Writes DIR/sweep.json and DIR/sweep.md (one row, "chosen" records S, w, C, γ, the selection and the
chosen candidate's mean fold score), the test predictions as DIR/kernel-<split>.npz
(ecfp.save_predictions' layout; an SVC's are logits) and DIR/export, the SVR (SVC) with its
backbone as one export that `gtscale predict` reads (an SVC's predicts probabilities).
"""

from __future__ import annotations

from pathlib import Path

from gtscale.errors import UserError
from gtscale.experiments.ecfp import save_predictions
from gtscale.members.fingerprints import ecfp
from gtscale.members.kernel_svr import fit_kernel_svr, write_kernel_export
from gtscale.members.svr import FOLDS, selection

PREDICTIONS = "kernel-{split}.npz"
LABEL = "ECFP4 + gtscale representation, kernel SVR"
LABEL_CLASSIFIER = "ECFP4 + gtscale representation, kernel SVC"
#: The same kernel on landmark molecules (members/landmark.py): `model="landmark"`.
LANDMARK_PREDICTIONS = "landmark-{split}.npz"
LANDMARK_LABEL = "ECFP4 + gtscale representation, landmark kernel ridge"


def run_kernel_baseline(shards: Path, backbone: Path, out: Path, split: str = "test", target: str | None = None, model: str = "kernel") -> list[dict]:
    """Choose and fit on the shards' train and valid splits, score `split`; the sweep row (written to
    out). `model`: the kernel SVR, or "landmark", the landmark kernel model of the same kernel
    (members/landmark.py: ridge on m landmark molecules, chosen by its own cross-validation over
    train and valid; an SVC's and a classifier's predictions are logits)."""
    from gtscale.experiments.baseline_set import read_baseline_set
    from gtscale.sweep import summarize, write_sweep
    from gtscale.inference import check_record, graph_representation, load_model_export
    from gtscale.models.export import is_model, read_export

    saved = read_export(backbone)  # read once: its tensors go into the model here and into the kernel's export below
    if not is_model(saved.config):
        raise UserError(f"--backbone {backbone}: an SVR export has no graph representation; name a gtscale model export")
    check_record(saved.meta, saved.folder)
    export = load_model_export(saved.folder, saved.config, saved.state, saved.meta)
    data = read_baseline_set(shards, split, target, FOLDS)
    counts, z, y = {}, {}, {}
    for name, molecules in data.splits.items():
        counts[name], y[name] = ecfp(molecules.smiles, data.max_atoms, counts=True), molecules.y
        z[name], reasons = graph_representation(export, molecules.smiles)
        rejected = next((i for i, why in enumerate(reasons) if why), None)
        if rejected is not None:
            raise UserError(f"{shards}: {name} molecule {molecules.smiles[rejected]!r} is rejected by {backbone}'s featurisation ({reasons[rejected]})")
    if model == "landmark":
        pred, chosen = landmark_fit(counts, z, y, data, saved, out)
        label = LANDMARK_LABEL
    else:
        svr = fit_kernel_svr(counts, z, y, classifier=data.classification)
        pred = svr.predict(counts["test"], z["test"])
        write_kernel_export(out / "export", svr, saved, data.export_manifest())
        score = {"cv_rocauc": svr.cv_rocauc} if data.classification else {"cv_rmse": svr.cv_rmse}
        chosen = {"C": svr.C, "similarity": svr.similarity, "weight": svr.weight, "gamma": svr.gamma, "selection": selection(data.classification), **score}
        label = LABEL_CLASSIFIER if data.classification else LABEL
    predictions = LANDMARK_PREDICTIONS if model == "landmark" else PREDICTIONS
    save_predictions(out / predictions.format(split=split), data.splits["test"].idx, pred, y["test"])
    runs = [{"seed": 0, "chosen": chosen, "metrics": data.metrics(pred)}]
    result = [{"label": label, "shards": str(shards), "backbone": str(backbone), "split": split, "target": data.target, "runs": runs,
               "summary": summarize(runs)}]
    write_sweep(out, result)
    return result


def landmark_fit(counts: dict, z: dict, y: dict, data, backbone, out: Path):
    """(test predictions, what was chosen) of the landmark kernel model fitted on train ∪ valid; its export in out/export."""
    import numpy as np

    from gtscale.members.landmark import fit_landmark, write_landmark_export
    from gtscale.members.svr import pooled

    fitted = fit_landmark(pooled(counts), pooled(z), pooled(y)[:, None], data.classification)
    write_landmark_export(out / "export", fitted, backbone, data.export_manifest())
    chosen = {**fitted.record(), "selection": selection(data.classification), ("cv_rocauc" if data.classification else "cv_rmse"): float(fitted.cv_score[0])}
    return np.asarray(fitted.predict(counts["test"], z["test"])[:, 0]), chosen
