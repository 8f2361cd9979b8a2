"""Small exports of every kind `gtscale predict` reads, made in a second or two without training:
a tiny EGT with random weights and the export.json record `gtscale export` writes for a run on
molecule shards, an ECFP + SVR fitted on a few dozen molecules, and a kernel SVR over the tiny EGT.
The bad-input, export-check and fuzz tests tamper with copies of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gtscale.format.schema import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS
from gtscale.models import load_model_config
from gtscale.models.export import build_exported, read_export, write_export
from gtscale.prep.sources.bundled import read_nci_tpsa

#: Molecules predicted by the tests (the first NCI ones), and a few that no model reads.
SMILES = read_nci_tpsa().smiles[:6]
UNREADABLE = ["C1CC", ""]


def tiny_model_config() -> dict:
    cfg = load_model_config("egt-small")
    return {**cfg, "num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1, "svd_rank": 4,
            "head": {"kind": "graph", "num_outputs": 1, "hidden": [16]}}


def shards_record(target_names: tuple[str, ...] = ("tpsa",)) -> dict:
    """export.json `shards` as `gtscale export` copies it from a smiles-csv manifest."""
    return {"dataset": "mols.csv",
            "transform": {"spd": True, "degree": True, "svd_rank": 4, "lap_k": 0, "paths": "bfs", "graph_features": [], "max_nodes": None,
                          "shard_size": 10000, "drop_duplicates": False},
            "task": {"type": "graph_regression", "num_targets": len(target_names), "target_names": list(target_names),
                     "target_stats": {"train": {"count": [4], "mean": [40.0], "std": [30.0]}}},
            "features": {"node": list(ATOM_FEATURE_DIMS), "edge": list(BOND_FEATURE_DIMS)}}


def model_export(out: Path, seed: int = 0) -> Path:
    """A tiny EGT export with the task and shards record of a regression run (shift 60, scale 40)."""
    cfg = tiny_model_config()
    torch.manual_seed(seed)
    state = build_exported(cfg).state_dict()
    task = {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}, "target_shift": [60.0], "target_scale": [40.0]}
    return write_export(out, state, cfg, {"run_dir": "runs/tiny", "tag": "step-00000003", "task": task, "shards": shards_record()})


def svr_export(out: Path) -> Path:
    """An ECFP + SVR fitted on 40 NCI molecules' TPSA."""
    from sklearn.svm import SVR

    from gtscale.members.fingerprints import ecfp, tanimoto

    from gtscale.members.svr import TanimotoSVR, write_svr_export

    table = read_nci_tpsa()
    bits = ecfp(table.smiles[10:50])
    fitted = SVR(kernel="precomputed", C=10.0).fit(tanimoto(bits, bits), table.targets[10:50, 0])
    return write_svr_export(out, TanimotoSVR.from_fitted(fitted, bits, 10.0), {"dataset": "nci", "task": shards_record()["task"]})


def kernel_export(out: Path, backbone: Path, similarity: str = "tanimoto") -> Path:
    """A kernel SVR over the backbone export `backbone`, with random (finite) dual coefficients."""
    from gtscale.members.fingerprints import ecfp
    from gtscale.members.kernel_svr import KernelSVR, write_kernel_export

    saved = read_export(backbone)
    width = saved.config["node_width"]
    rng = np.random.default_rng(0)
    counts = ecfp(read_nci_tpsa().smiles[10:22], counts=True)
    svr = KernelSVR(counts, rng.standard_normal((12, width)), rng.standard_normal(12), 40.0, 10.0, 0.5, 0.1,
                    rng.standard_normal(width), rng.uniform(0.5, 2.0, width), similarity=similarity)
    return write_kernel_export(out, svr, saved, {"dataset": "nci", "task": shards_record()["task"]})


def molecules_csv(path: Path) -> Path:
    pd.DataFrame({"smiles": [*SMILES, *UNREADABLE]}).to_csv(path, index=False)
    return path


def save_tensors(folder: Path, state: dict) -> None:
    """model.pt of `folder` replaced by `state`, and export.json's checksum made to match: a crafted
    export whose values the checks after the checksum (ranges, shapes, an SVR's tensors) must find."""
    import json

    from gtscale.models.export import tensors_sha256

    torch.save(state, folder / "model.pt")
    meta = json.loads((folder / "export.json").read_text())
    (folder / "export.json").write_text(json.dumps({**meta, "tensors_sha256": tensors_sha256(state)}))
