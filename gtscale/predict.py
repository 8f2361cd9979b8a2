"""A fine-tuned model's predictions for new molecules (`gtscale predict EXPORT… --input mols.csv --out
preds.csv`, chemprop's `predict`). A top-level module: it joins inference.py (a
model export run on molecules: the sharder's featurizer, the loader's collate, the export reader,
the task's predictions) with the SVR models of experiments/.

- Molecules are featurised by the sharder's own code (`writer.featurize_rows`, with the structure
  options and graph features the export's shards were made with, read from export.json) and
  batched by the loader's `collate`: the model sees exactly what it saw in training.
- One export gives a `<name>_pred` column per target; several form an ensemble, and each target
  gets `<name>_mean` and `<name>_std` (over the members, ddof 0; `--weights` weighs both). The
  suffixes keep a labelled input's own target columns beside the predictions. Regression
  predictions are in the targets' units; a binary (bce) task's are probabilities.
- Every input row gives one output row, in order, with the input's columns as they were read
  (text, blank lines kept). A row RDKit cannot parse (or one the sharder would reject, or one too
  large to read: prep/molecule_limits.py) gets empty predictions and its reason in the `reason`
  column.
- The output is written whole or not at all, and replaces only a CSV predict wrote (its header ends
  with prediction columns and `reason`) unless `--overwrite`; never the input or an export.
- `--input` may also be a shard folder (manifest.json): every record of the chosen splits is
  predicted, with its split and idx.
- An ECFP + SVR export (`gtscale baseline ecfp`'s DIR/export, model.yaml `name: ecfp-svr`) is a
  member like a model: its Morgan bits are computed from the SMILES (so not from a shard folder);
  `gtscale moleculeace-table`'s blend is the seeds' exports and it with `--weights 1 1 1 3`.
- A kernel SVR export (`gtscale baseline kernel`'s DIR/export, `name: kernel-svr`) carries its
  backbone: its Morgan bits and the backbone's graph representation (inference.graph_representation, with
  the backbone's own featurisation) are computed from the SMILES, so again not from a shard folder.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.experiments.ecfp import SVR_EXPORT_NAME, TanimotoSVR, ecfp_rows, read_svr_export
from gtscale.experiments.kernel_svr import KERNEL_EXPORT_NAME, KernelSVR, read_kernel_export
from gtscale.inference import (LoadedExport, batch_scores, check_record, graph_representation, load_model_export, molecule_records,
                               padded_batches)
from gtscale.format.decode import Record
from gtscale.io import atomic_write_text, claim_out_file, disk_full_is_user_error, read_first_line
from gtscale.loader.collate import collate
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
from gtscale.prep.sources.base import read_csv, require_columns, text_column
from gtscale.prep.writer import ShardOptions
from gtscale.train.config import TaskConfig


@dataclass
class FingerprintExport:
    """An ECFP + SVR export ready to predict (experiments/ecfp.py wrote it)."""

    path: Path
    svr: TanimotoSVR
    task: TaskConfig
    target_names: list[str]
    max_nodes: int = DEFAULT_MAX_ATOMS  # most atoms of a molecule read (its shards record none)


@dataclass
class KernelExport:
    """A kernel SVR export ready to predict (experiments/kernel_svr.py): the SVR and the backbone
    whose graph representation it reads."""

    path: Path
    svr: KernelSVR
    backbone: LoadedExport
    task: TaskConfig
    target_names: list[str]


def load_export(path: Path) -> LoadedExport | FingerprintExport | KernelExport:
    """Read an export folder (or its model.pt): weights-only, checked against its model config.

    The one place predict reads exports."""
    from gtscale.models.export import MODEL_FILE, read_export

    export = read_export(path)
    meta, model_cfg, folder = export.meta, export.config, export.folder
    check_record(meta, folder)
    names = list(meta["shards"].get("task", {}).get("target_names", []))
    task = from_dict(TaskConfig, meta["task"], prefix=f"{folder / 'export.json'}: task.")
    if model_cfg.get("name") == SVR_EXPORT_NAME:
        return FingerprintExport(folder, read_svr_export(model_cfg, export.state, str(folder / MODEL_FILE)), task, names or ["y0"])
    if model_cfg.get("name") == KERNEL_EXPORT_NAME:
        svr, backbone_state = read_kernel_export(model_cfg, export.state, str(folder / MODEL_FILE))
        check_record(meta.get("backbone", {}), folder)
        backbone = load_model_export(folder, model_cfg["backbone"], backbone_state, meta["backbone"])
        return KernelExport(folder, svr, backbone, task, names or ["y0"])
    return load_model_export(folder, model_cfg, export.state, meta)


def with_max_nodes(export: LoadedExport | FingerprintExport | KernelExport, max_nodes: int) -> LoadedExport | FingerprintExport | KernelExport:
    """The export reading molecules of at most `max_nodes` atoms (--max-nodes)."""
    if isinstance(export, KernelExport):
        return replace(export, backbone=with_max_nodes(export.backbone, max_nodes))
    if isinstance(export, FingerprintExport):
        return replace(export, max_nodes=max_nodes)
    return replace(export, options=replace(export.options, max_nodes=max_nodes))


def ensemble_weights(weights: list[float] | None, members: int) -> np.ndarray:
    """float64 [members] weights summing to 1: equal by default; else the given ones, refused unless
    finite, non-negative and not all zero. Divided by their largest first: the sum of 1e308 and
    1e308 is inf, which would turn every mean into 0."""
    if weights is None:
        return np.full(members, 1.0 / members)
    w = np.asarray(weights, np.float64)
    if len(w) != members or not np.isfinite(w).all() or (w < 0).any() or not (w > 0).any():
        raise UserError(f"--weights: give one weight per export ({members}), finite, >= 0 and not all 0; got {weights}")
    w = w / w.max()
    return w / w.sum()


class Predictor:
    """Predictions of one or more exports for molecules, batch by batch (records made once per
    distinct featurisation among the exports)."""

    def __init__(self, exports: list[LoadedExport | FingerprintExport | KernelExport], weights: list[float] | None = None):
        names = exports[0].target_names
        for export in exports[1:]:
            if export.target_names != names:
                raise UserError(f"{export.path}: predicts {export.target_names}, {exports[0].path} predicts {names}: "
                                "an ensemble's members predict the same targets")
        self.exports, self.target_names = exports, names
        self.weights = ensemble_weights(weights, len(exports))

    def scores(self, export: LoadedExport, records: list[Record], batch_size: int) -> np.ndarray:
        """float [n, T] predictions of one export for these records, in batches of `batch_size`
        molecules within a budget of padded node pairs (inference.padded_batches)."""
        out = np.empty((len(records), len(self.target_names)), np.float32)
        for members in padded_batches(records, batch_size):
            out[members] = batch_scores(export, collate([records[i] for i in members], export.keys, export.path_dist))
        return out

    def smiles(self, smiles: list[str]) -> tuple[np.ndarray, list[str]]:
        """(predictions [members, n, T], NaN where a molecule was rejected; reason per molecule, "" if
        none: a row without a prediction always has one)."""
        out = np.full((len(self.exports), len(smiles), len(self.target_names)), np.nan, np.float32)
        reasons = [""] * len(smiles)
        made: dict[ShardOptions, tuple[list[Record], list[int]]] = {}
        for member, export in enumerate(self.exports):
            if isinstance(export, KernelExport):
                bits, unread = ecfp_rows(smiles, export.backbone.options.max_nodes)
                z, why = graph_representation(export.backbone, smiles)
                kept = np.array([not (a or b) for a, b in zip(unread, why)], bool)
                out[member, kept, 0] = export.svr.predict(bits[kept], z[kept])
                for row in np.flatnonzero(~kept):
                    reasons[row] = reasons[row] or why[row] or unread[row]
                continue
            if isinstance(export, FingerprintExport):
                bits, unread = ecfp_rows(smiles, export.max_nodes)
                kept = np.array([not why for why in unread], bool)
                out[member, kept, 0] = export.svr.predict(bits[kept])
                for row in np.flatnonzero(~kept):
                    reasons[row] = reasons[row] or unread[row]
                continue
            if export.options not in made:
                made[export.options] = molecule_records(smiles, export.options, reasons)
            records, rows = made[export.options]
            if records:
                out[member, rows] = self.scores(export, records, len(smiles))  # the caller's batch
        for row in np.flatnonzero(not_finite(out)):
            reasons[row] = reasons[row] or "prediction_not_finite"
        return out, reasons


def not_finite(values: np.ndarray) -> np.ndarray:
    """bool [n]: the molecules of predictions [members, n, T] that some member gives NaN or inf
    (a rejected molecule, or a model's output that is no number): rows that need a reason."""
    return ~np.isfinite(values).all(axis=(0, 2))


def predict_table(predictor: Predictor, frame: pd.DataFrame, smiles_column: str, batch_size: int, progress: bool) -> pd.DataFrame:
    """The input rows with prediction columns and a reason column."""
    empty = np.zeros((len(predictor.exports), 0, len(predictor.target_names)), np.float32)
    taken = [c for c in [*prediction_columns(empty, predictor.target_names).columns, "reason"] if c in frame.columns]
    if taken:
        raise UserError(f"--input has a column {taken[0]!r}, which predict writes; rename it")
    smiles = text_column(frame[smiles_column])
    parts, reasons = [], []
    with tqdm(total=len(smiles), unit="mol", desc="predict", disable=not progress) as bar:
        for start in range(0, len(smiles), batch_size):
            values, why = predictor.smiles(smiles[start : start + batch_size])
            parts.append(values)
            reasons += why
            bar.update(len(why))
    values = np.concatenate(parts, axis=1) if parts else empty
    columns = prediction_columns(values, predictor.target_names, predictor.weights)
    return pd.concat([frame.reset_index(drop=True), columns, pd.DataFrame({"reason": reasons})], axis=1)


def prediction_columns(values: np.ndarray, names: list[str], weights: np.ndarray | None = None) -> pd.DataFrame:
    """<name>_pred per target (one member), or <name>_mean and <name>_std (an ensemble: over the
    members, weighted by `weights` (ensemble_weights: summing to 1), NaN where any member has none)."""
    if values.shape[0] == 1:
        return pd.DataFrame({f"{name}_pred": values[0, :, t] for t, name in enumerate(names)})
    w = (ensemble_weights(None, values.shape[0]) if weights is None else np.asarray(weights, np.float64))[:, None]
    columns = {}
    for t, name in enumerate(names):
        v = values[:, :, t].astype(np.float64)
        mean = (w * v).sum(axis=0)
        columns[f"{name}_mean"] = mean
        columns[f"{name}_std"] = np.sqrt((w * (v - mean) ** 2).sum(axis=0))
    return pd.DataFrame(columns)


def predict_shards(predictor: Predictor, folder: Path, splits: list[str] | None, batch_size: int, progress: bool) -> pd.DataFrame:
    """split, idx, prediction and reason columns of every record of `splits` (default: every split
    with records) of a shard folder."""
    from gtscale.format.manifest import load_manifest
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader

    manifest = load_manifest(folder)
    unknown = [s for s in splits or [] if s not in manifest["splits"]]
    if unknown:
        raise UserError(f"--splits: {unknown[0]!r} is not a split of {folder} (has {', '.join(manifest['splits'])})")
    splits = splits or [s for s in manifest["splits"] if manifest["splits"][s].get("samples")]  # all: those with records
    for split in splits:
        if not manifest["splits"][split].get("samples"):
            raise UserError(f"--splits: split {split!r} of {folder} has no records")
    if not splits:
        raise UserError(f"{folder}: no split holds a record")
    for export in predictor.exports:
        if isinstance(export, (FingerprintExport, KernelExport)):
            raise UserError(f"{export.path}: an SVR export (ECFP + SVR, or the kernel SVR) reads SMILES, which shards do not keep: predict from a CSV of SMILES instead")
        made = manifest.get("features", {}).get("graph")
        wanted = export.options.graph_features.manifest() if export.options.graph_features else None
        if wanted and made != wanted:
            raise UserError(f"{folder}: its graph features ({(made or {}).get('generators', 'none')}, or their train statistics) are not "
                            f"the ones {export.path} was trained on ({wanted['generators']}): predict from a CSV of SMILES instead")
    frames = []
    total = sum(manifest["splits"][s]["samples"] for s in splits)
    with tqdm(total=total, unit="mol", desc="predict", disable=not progress) as bar:
        for split in splits:
            idx, members = None, []
            for export in predictor.exports:
                config = LoaderConfig(batching="graphs", batch_size=batch_size, bucketing=False, num_workers=0, keys=export.keys,
                                      path_edges_max_dist=export.path_dist)
                ids, values = [], []
                for batch in build_loader(manifest, split, config, train=False, rank=0, world_size=1):
                    ids.append(batch.idx.numpy())
                    values.append(batch_scores(export, batch))
                    if export is predictor.exports[0]:
                        bar.update(len(ids[-1]))
                ids = np.concatenate(ids)
                order = np.argsort(ids)
                idx = ids[order]
                members.append(np.concatenate(values)[order])
            values = np.stack(members)
            reasons = np.where(not_finite(values), "prediction_not_finite", "")
            columns = prediction_columns(values, predictor.target_names, predictor.weights)
            frames.append(pd.concat([pd.DataFrame({"split": split, "idx": idx}), columns, pd.DataFrame({"reason": reasons})], axis=1))
    return pd.concat(frames, ignore_index=True)


def written_by_predict(header: list[str]) -> bool:
    """Whether a CSV header is one predict writes: prediction columns (<name>_pred, or <name>_mean
    and <name>_std), then `reason` (the mark by which --out may replace a file: io.claim_out_file)."""
    return len(header) >= 2 and header[-1] == "reason" and (header[-2].endswith("_pred") or header[-2].endswith("_std"))


def csv_header(path: Path) -> list[str] | None:
    line = read_first_line(path)
    return None if line is None else next(csv.reader([line]), [])


def csv_text(table: pd.DataFrame) -> str:
    """The table as CSV that reads back as the same rows. Lines end in \\n, and the default quoting
    leaves a carriage return in a cell (an input's quoted cell) bare, where readers end the line:
    such a table is written with every field quoted."""
    text = table.to_csv(index=False)
    return table.to_csv(index=False, quoting=csv.QUOTE_ALL) if "\r" in text else text


def predict(exports: list[str], input: str, out: str, *, smiles_column: str = "smiles", splits: str | None = None,
            overwrite: bool = False, max_nodes: int | None = None, batch_size: int = 64, weights: list[float] | None = None,
            progress: bool = True) -> tuple[Path, pd.DataFrame]:
    """Predictions of `exports` (several: an ensemble, weighed by `weights`) for every row of the CSV
    `input` (its SMILES in `smiles_column`) or every record of the shard folder `input` (`splits`
    comma-separated, default all), written to the CSV `out` (module docstring); (out, the table)."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    if max_nodes is not None and max_nodes < 1:
        raise UserError(f"--max-nodes must be >= 1, got {max_nodes}")
    source = Path(input)
    target = claim_out_file(out, written_by_predict, "--out", read_mark=csv_header, inputs=[source, *exports],
                            overwrite_flag="--overwrite", overwrite=overwrite)
    loaded = [load_export(Path(p)) for p in exports]
    if max_nodes is not None:
        loaded = [with_max_nodes(export, max_nodes) for export in loaded]
    predictor = Predictor(loaded, weights)
    if source.is_dir():
        table = predict_shards(predictor, source, [s for s in splits.split(",") if s] if splits else None, batch_size, progress)
    else:
        # Every cell as text, as written (ids keep their zeros, "NA" stays "NA"), and every line a
        # row: a blank line is a molecule left empty, and the output's rows stay the input's.
        frame = read_csv(source, dtype=str, na_filter=False, skip_blank_lines=False)
        require_columns(frame, [smiles_column], source)
        table = predict_table(predictor, frame, smiles_column, batch_size, progress)
    target.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(target):
        atomic_write_text(target, csv_text(table))
    return target, table
