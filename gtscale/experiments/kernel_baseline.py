"""`gtscale baseline kernel SHARDS --backbone EXPORT --out DIR` runs this: the kernel SVR of
experiments/kernel_svr.py (ECFP4 Tanimoto + an RBF kernel on a pretrained export's graph
representation, the backbone frozen) fitted on a MoleculeACE shard set's train and validation
molecules, its kernel weight and C chosen by cross-validation over them (ecfp.SELECTION), scored
on the test split like `gtscale baseline ecfp`.

Writes DIR/sweep.json and DIR/sweep.md (one row, "chosen" records w, C, γ and the selection), the test
predictions as DIR/kernel-<split>.npz (ecfp.save_predictions' layout) and DIR/export, the SVR with
its backbone as one export that `gtscale predict` reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.experiments.ecfp import SELECTION, SVR_EXPORT_NAME, ecfp, save_predictions
from gtscale.experiments.kernel_svr import KERNEL_EXPORT_NAME, fit_kernel_svr, write_kernel_export

PREDICTIONS = "kernel-{split}.npz"
LABEL = "ECFP4 + gtscale representation, kernel SVR"


def run_kernel_baseline(shards: Path, backbone: Path, out: Path, split: str = "test") -> list[dict]:
    """Choose and fit on the shards' train and valid splits, score `split`; the sweep row (written to out)."""
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    from gtscale.experiments import moleculeace
    from gtscale.experiments.sweep import summarize, write_sweep
    from gtscale.format.manifest import load_manifest
    from gtscale.inference import check_record, graph_representation, load_model_export
    from gtscale.models.export import read_export

    saved = read_export(backbone)  # read once: its tensors go into the model here and into the kernel's export below
    if saved.config.get("name") in (SVR_EXPORT_NAME, KERNEL_EXPORT_NAME):
        raise UserError(f"--backbone {backbone}: an SVR export has no graph representation; name a gtscale model export")
    check_record(saved.meta, saved.folder)
    export = load_model_export(saved.folder, saved.config, saved.state, saved.meta)
    table = moleculeace.source_table(shards)
    if split not in table.splits or "valid" not in table.splits:
        raise UserError(f"{shards}: needs splits train, valid and {split} (has {', '.join(table.splits)})")
    rows_of = {"train": table.splits["train"], "valid": table.splits["valid"], "test": table.splits[split]}
    bits, z, y = {}, {}, {}
    for name, rows in rows_of.items():
        smiles = [table.smiles[i] for i in rows]
        bits[name], y[name] = ecfp(smiles), table.targets[rows, 0].astype(np.float64)
        z[name], reasons = graph_representation(export, smiles)
        rejected = next((i for i, why in enumerate(reasons) if why), None)
        if rejected is not None:
            raise UserError(f"{shards}: {name} molecule {smiles[rejected]!r} is rejected by {backbone}'s featurisation ({reasons[rejected]})")
    svr = fit_kernel_svr(bits, z, y)
    pred = svr.predict(bits["test"], z["test"])
    save_predictions(out / PREDICTIONS.format(split=split), rows_of["test"], pred, y["test"])
    write_kernel_export(out / "export", svr, saved, load_manifest(shards))
    metrics = {"rmse": float(root_mean_squared_error(y["test"], pred)), "mae": float(mean_absolute_error(y["test"], pred)),
               "cliff_rmse": moleculeace.cliff_rmse(table, rows_of["test"], pred[:, None], y["test"][:, None])}
    runs = [{"seed": 0, "chosen": {"C": svr.C, "weight": svr.weight, "gamma": svr.gamma, "selection": SELECTION, "cv_rmse": svr.cv_rmse}, "metrics": metrics}]
    result = [{"label": LABEL, "shards": str(shards), "backbone": str(backbone), "split": split, "runs": runs, "summary": summarize(runs)}]
    write_sweep(out, result)
    return result
