"""`gtscale baseline ecfp SHARDS --out DIR [--seeds 0 1 2]`: the MoleculeACE paper's strongest
classical methods on exactly the shards' split, as rows of the sweep tables.

ECFP4 = RDKit Morgan fingerprints, radius 2, 2,048 bits. SVR with the Tanimoto kernel
(MoleculeACE's SVM) and a random forest (scikit-learn), each fitted on the shards' train split
with its hyperparameter chosen on their validation split (SVR: C; RF: max_features), then scored
on the test split: RMSE, MAE and, for MoleculeACE sets, the activity-cliff RMSE. The molecules are
read again through the sharder's own reader (experiments/moleculeace.source_table), so the
splits are the shards' row for row. The seed only changes the forest (SVR is deterministic, its
std is 0). Writes DIR/sweep.json and DIR/sweep.md (`gtscale sweep --compare` reads them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gtscale.errors import UserError

RADIUS, BITS = 2, 2048
SVR_C = (0.1, 1.0, 10.0, 100.0)
RF_MAX_FEATURES = ("sqrt", 0.33, 1.0)
RF_TREES = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", help="a MoleculeACE shard folder (gtscale shard moleculeace --dataset …)")
    parser.add_argument("--out", required=True, help="folder for sweep.json / sweep.md")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (the forest's; default 0 1 2)")
    parser.add_argument("--models", nargs="+", choices=["svr", "rf"], default=["svr", "rf"])
    parser.add_argument("--split", default="test", help="split to score (default test)")
    parser.add_argument("--trees", type=int, default=RF_TREES, help=f"random forest size (default {RF_TREES})")


def ecfp(smiles: list[str]) -> np.ndarray:
    """[n, 2048] uint8 Morgan bits (radius 2) of each molecule."""
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=RADIUS, fpSize=BITS)
    out = np.zeros((len(smiles), BITS), dtype=np.uint8)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is None:
            raise UserError(f"SMILES {s!r} (row {i}) does not parse")
        out[i] = generator.GetFingerprintAsNumPy(mol)
    return out


def tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto similarity of every row of a with every row of b (bit vectors)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    common = a @ b.T
    return common / np.maximum(a.sum(1)[:, None] + b.sum(1)[None, :] - common, 1e-12)


def fit_svr(x: dict, y: dict):
    """Tanimoto-kernel SVR, C chosen on validation RMSE; returns the test predictions."""
    from sklearn.metrics import root_mean_squared_error
    from sklearn.svm import SVR

    k_train = tanimoto(x["train"], x["train"])
    best = min(SVR_C, key=lambda c: root_mean_squared_error(y["valid"], SVR(kernel="precomputed", C=c).fit(k_train, y["train"]).predict(tanimoto(x["valid"], x["train"]))))
    return SVR(kernel="precomputed", C=best).fit(k_train, y["train"]).predict(tanimoto(x["test"], x["train"])), {"C": best}


def fit_rf(x: dict, y: dict, seed: int, trees: int = RF_TREES):
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.metrics import root_mean_squared_error

    def forest(features):
        return RandomForestRegressor(n_estimators=trees, max_features=features, random_state=seed, n_jobs=1).fit(x["train"], y["train"])

    best = min(RF_MAX_FEATURES, key=lambda f: root_mean_squared_error(y["valid"], forest(f).predict(x["valid"])))
    return forest(best).predict(x["test"]), {"max_features": best}


def run_baseline(shards: Path, out: Path, seeds: list[int], models: list[str], split: str = "test", trees: int = RF_TREES) -> list[dict]:
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    from gtscale.experiments import moleculeace
    from gtscale.experiments.sweep import summarize, write_sweep

    table = moleculeace.source_table(shards)
    if split not in table.splits or "valid" not in table.splits:
        raise UserError(f"{shards}: needs splits train, valid and {split} (has {', '.join(table.splits)})")
    rows_of = {"train": table.splits["train"], "valid": table.splits["valid"], "test": table.splits[split]}
    bits = ecfp([table.smiles[i] for i in np.concatenate(list(rows_of.values()))])
    x, y, start = {}, {}, 0
    for name, rows in rows_of.items():
        x[name], y[name], start = bits[start:start + len(rows)], table.targets[rows, 0].astype(np.float64), start + len(rows)
    result = []
    for model in models:
        runs = []
        svr = fit_svr(x, y) if model == "svr" else None  # deterministic: fitted once, one row per seed
        for seed in seeds:
            pred, chosen = svr if svr is not None else fit_rf(x, y, seed, trees)
            true = y["test"][:, None]
            metrics = {"rmse": float(root_mean_squared_error(y["test"], pred)), "mae": float(mean_absolute_error(y["test"], pred)),
                       "cliff_rmse": moleculeace.cliff_rmse(table, rows_of["test"], pred[:, None], true)}
            runs.append({"seed": seed, "chosen": chosen, "metrics": metrics})
        result.append({"label": f"ECFP4 + {model.upper()}", "shards": str(shards), "split": split, "runs": runs, "summary": summarize(runs)})
    write_sweep(out, result)
    return result


def run(args: argparse.Namespace) -> int:
    from gtscale.experiments.sweep import TABLE_FILE

    out = Path(args.out)
    if args.trees < 1:
        raise UserError(f"--trees must be >= 1, got {args.trees}")
    run_baseline(Path(args.shards), out, args.seeds, args.models, args.split, args.trees)
    print((out / TABLE_FILE).read_text(), end="")
    return 0
