"""The molecules a baseline (`gtscale baseline ecfp`, `gtscale baseline kernel`) fits and scores:
any graph-level shard folder's train split, its valid split where it has one, and the split it
scores, record by record as the shards hold them (format/record_meta.py: each record's SMILES,
kept in its meta, its idx and its targets), so a baseline's split is the trained models' exactly.

One target is fitted: the shards' only one, or the one named. Records without a label for it are
left out of every split. The manifest's task type decides the model: graph_classification (0/1
labels) an SVC scored by ROC-AUC, anything else an SVR scored by RMSE and MAE, plus MoleculeACE's
activity-cliff RMSE on a MoleculeACE set (its records' names carry the cliff flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.format.manifest import NODE_TASK, load_manifest, task_type
from gtscale.format.record_meta import record_smiles, split_meta
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS

CLASSIFICATION = "graph_classification"
#: The splits a baseline chooses its hyperparameters and fits on (valid only where the shards have one).
FIT_SPLITS = ("train", "valid")


@dataclass
class Molecules:
    """One split's labelled records, sorted by idx."""

    idx: np.ndarray  # int64 [n] record idx (the source's molecule index)
    smiles: list[str]
    names: list[str | None]  # the source's ids where they are not integers (MoleculeACE: its cliff flags)
    y: np.ndarray  # float64 [n] the fitted target


@dataclass
class BaselineSet:
    """A shard folder's molecules as a baseline sees them: splits "train", "valid" (where the shards
    have one) and "test", the scored split (whatever its name in the shards)."""

    shards: Path
    manifest: dict
    target: str
    classification: bool
    splits: dict[str, Molecules]
    max_atoms: int  # the largest molecule read (the shards' --max-nodes, else what they hold, at least DEFAULT_MAX_ATOMS)
    cliff: np.ndarray | None  # bool [n test]: MoleculeACE's activity-cliff molecules; None for other sets

    def fitted(self) -> list[str]:
        """The splits hyperparameters are chosen and the model fitted on, in order."""
        return [s for s in FIT_SPLITS if s in self.splits]

    def metrics(self, y_pred: np.ndarray) -> dict[str, float]:
        """The scored split's metrics of predictions [n test] (an SVC's: decision values or probabilities)."""
        from sklearn.metrics import mean_absolute_error, roc_auc_score, root_mean_squared_error

        y = self.splits["test"].y
        if self.classification:  # one class alone in the scored split has no ROC-AUC: left out of the summary
            return {"rocauc": float(roc_auc_score(y, y_pred)) if len(np.unique(y)) == 2 else float("nan")}
        metrics = {"rmse": float(root_mean_squared_error(y, y_pred)), "mae": float(mean_absolute_error(y, y_pred))}
        if self.cliff is not None:
            from gtscale.prep.sources.moleculeace import rmse_where

            metrics["cliff_rmse"] = rmse_where(self.cliff, y_pred[:, None], y[:, None])
        return metrics

    def export_manifest(self) -> dict:
        """The manifest as an export of a model of this one target records it (predict names its column)."""
        task = {"type": task_type(self.manifest), "num_targets": 1, "target_names": [self.target]}
        return {"dataset": self.manifest["dataset"], "task": task}


def read_baseline_set(shards: Path, split: str, target: str | None, folds: int) -> BaselineSet:
    """The train, valid (if any) and `split` molecules of a graph-level shard folder; a UserError
    naming the folder for anything a baseline cannot fit (a node task, no such split or target,
    records without SMILES, labels that are not 0/1 for a classification task, fewer labelled
    molecules, of each class for a classifier, than the `folds` of cross-validation that choose
    its hyperparameters)."""
    from gtscale.prep.sources import moleculeace

    manifest = load_manifest(shards)
    kind = task_type(manifest)
    if kind == NODE_TASK:
        raise UserError(f"{shards}: a node task ({NODE_TASK}); the baselines fit molecules' graph targets")
    names = list(manifest.get("task", {}).get("target_names", []))
    column = pick_target(shards, names, target)
    if split in FIT_SPLITS:
        raise UserError(f"--split {split}: the baselines fit on {' and '.join(FIT_SPLITS)}; score another split")
    for needed in ("train", split):
        if needed not in manifest["splits"]:
            raise UserError(f"{shards}: needs splits train and {split} (has {', '.join(manifest['splits'])})")
    splits, largest = {}, 0
    for name, shard_split in [(s, s) for s in FIT_SPLITS if s in manifest["splits"]] + [("test", split)]:
        metas, y = split_meta(manifest, shard_split)
        keep = [i for i in range(len(metas)) if not np.isnan(y[i, column])]
        splits[name] = Molecules(np.array([metas[i]["idx"] for i in keep], np.int64), [record_smiles(shards, metas[i]) for i in keep],
                                 [metas[i].get("name") for i in keep], y[keep, column].astype(np.float64))
        largest = max([largest, *(int(m.get("num_nodes", 0)) for m in metas)])
    classification = kind == CLASSIFICATION
    check_labels(shards, names[column], splits, classification, folds)
    max_nodes = manifest.get("transform", {}).get("max_nodes")
    cliff = moleculeace.cliff_mask(shards, split, splits["test"].idx) if moleculeace.NAME.fullmatch(str(manifest["dataset"])) else None
    return BaselineSet(Path(shards), manifest, names[column], classification, splits, max_nodes or max(DEFAULT_MAX_ATOMS, largest), cliff)


def pick_target(shards: Path, names: list[str], target: str | None) -> int:
    """The column of the fitted target: `target` (--target), else the shards' only one."""
    if target is not None:
        if target not in names:
            raise UserError(f"--target {target!r}: not a target of {shards} (has {', '.join(names) or 'none'})")
        return names.index(target)
    if len(names) != 1:
        listed = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
        raise UserError(f"{shards}: has {len(names)} targets ({listed or 'none'}); a baseline fits one: pass --target NAME"
                        if names else f"{shards}: has no targets to fit")
    return 0



def check_labels(shards: Path, target: str, splits: dict[str, Molecules], classification: bool, folds: int) -> None:
    """Enough labelled molecules for `folds`-fold cross-validation; 0/1 labels for a classification task."""
    fitted = np.concatenate([splits[s].y for s in FIT_SPLITS if s in splits])
    if classification:
        other = np.concatenate([m.y for m in splits.values()])
        other = other[(other != 0) & (other != 1)]
        if len(other):
            raise UserError(f"{shards}: task {CLASSIFICATION}, but target {target!r} holds {other[0]:g}; a classifier reads labels 0 and 1")
        fewest = min(int((fitted == 0).sum()), int((fitted == 1).sum()))
        if fewest < folds:
            raise UserError(f"{shards}: target {target!r} has {fewest} molecule(s) of one class in {' and '.join(FIT_SPLITS)}; "
                            f"choosing C by {folds}-fold cross-validation needs {folds} of each")
    elif len(fitted) < folds:
        raise UserError(f"{shards}: {len(fitted)} labelled molecule(s) of target {target!r} in {' and '.join(FIT_SPLITS)}; "
                        f"choosing C by {folds}-fold cross-validation needs {folds}")
    if not len(splits["test"].y):
        raise UserError(f"{shards}: the scored split has no molecule labelled for target {target!r}")
