"""The members `gtscale fit` runs on large sets, whose time grows linearly in molecules:

- the landmark kernel model (landmark.py), one model of every target column: chosen (S, w, α) by
  cross-validation on the train split, fitted there to predict the valid split (what it is chosen
  among the members by), then fitted again on train ∪ valid with the same choice (its export);
- ECFP4 + random forest (scikit-learn's RandomForestRegressor / Classifier), the baseline of large
  sets: a forest per target on the ECFP4 bits (sparse) of train ∪ valid, scored on test beside the
  members and never chosen, so that the report's baseline is the fingerprint model chemists know
  at every size. Each tree draws at most FOREST_SAMPLES molecules, which bounds its work.
"""

from __future__ import annotations

import os

import numpy as np

from gtscale.fit.exports import FittedMember

#: Trees of the baseline forest, and most molecules each tree draws.
FOREST_TREES, FOREST_SAMPLES = 100, 20_000


def probabilities(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def landmark_member(features, task: str, record: dict, saved_backbone) -> tuple[FittedMember, np.ndarray, np.ndarray]:
    """(the landmark kernel member of every target, the valid rows it predicted, its outputs there
    [n, T]: values, or a classifier's probabilities); `features`: fit.Features of the whole table."""
    from gtscale.members.landmark import fit_landmark, write_landmark_export

    classifier = task == "classification"
    on_train = fit_landmark(features.counts["train"], features.z["train"], features.y["train"], classifier)
    valid = on_train.predict(features.counts["valid"], features.z["valid"])
    pooled = {name: np.concatenate([getattr(features, name)["train"], getattr(features, name)["valid"]]) for name in ("counts", "z", "y")}
    model = fit_landmark(pooled["counts"], pooled["z"], pooled["y"], classifier, choice=on_train.choice())
    chosen = {**model.record(), "selection": "cross-validation on the train split; refitted on train + valid",
              ("cv_rocauc" if classifier else "cv_rmse"): [float(s) for s in on_train.cv_score]}
    writers = {"landmark": lambda folder: write_landmark_export(folder, model, saved_backbone, record)}
    member = FittedMember("landmark", writers, [1.0], np.empty(0), chosen, all_targets=True)
    return member, features.rows["valid"], probabilities(valid) if classifier else valid


def forest_baseline(features, task: str, seed: int = 0) -> tuple[np.ndarray, dict]:
    """(its test outputs [n_test, T] — values, or probabilities of 1 —, what was fitted): a forest per
    target on the molecules of train ∪ valid labelled for it."""
    from scipy.sparse import csr_matrix
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    classifier = task == "classification"
    bits = csr_matrix(np.concatenate([features.counts["train"], features.counts["valid"]]) > 0, dtype=np.float32)
    test = csr_matrix(features.counts["test"] > 0, dtype=np.float32)
    y = np.concatenate([features.y["train"], features.y["valid"]])
    out = np.full((test.shape[0], y.shape[1]), np.nan)
    for t in range(y.shape[1]):
        labelled = np.flatnonzero(np.isfinite(y[:, t]))
        kind = RandomForestClassifier if classifier else RandomForestRegressor
        forest = kind(n_estimators=FOREST_TREES, max_features="sqrt", max_samples=min(1.0, FOREST_SAMPLES / len(labelled)), random_state=seed,
                      n_jobs=len(os.sched_getaffinity(0))).fit(bits[labelled], y[labelled, t])
        out[:, t] = forest.predict_proba(test)[:, list(forest.classes_).index(1.0)] if classifier else forest.predict(test)
    return out, {"trees": FOREST_TREES, "max_features": "sqrt", "max_samples": FOREST_SAMPLES, "library": "scikit-learn"}
