"""Predictions for new molecules (`gtscale predict EXPORT… --input mols.csv --out preds.csv`,
chemprop's `predict`): the members of members/ (model exports run on molecules by inference.py,
and the SVR exports of members/svr.py and kernel_svr.py), ensembled by members/ensemble.py.

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
- Members are exports of any kind (members/load.py): fine-tuned models, an ECFP + SVR
  (`gtscale baseline ecfp`) and a kernel SVR on a backbone's representation (`gtscale baseline
  kernel`). The SVRs read SMILES: from a shard folder, the SMILES each record keeps. Members are
  matched by task (as many targets, of the same kind), not by their targets' names: the first
  member names the columns. An ensemble export (`gtscale fit`'s DIR/export: ensemble.json and its
  member folders) brings its members and their weights; an export of several targets (`gtscale
  fit --target-columns a b`'s: targets.json) is one member with a column per target.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from gtscale.errors import UserError
from gtscale.members.ensemble import ensemble, ensemble_weights
from gtscale.inference import SORT_WINDOW, LoadedExport, Molecules, shard_batches
from gtscale.io import atomic_write_text, check_can_write, claim_out_file, disk_full_is_user_error, read_first_line
from gtscale.members.load import Member, check_same_task, load_members, with_max_nodes
from gtscale.prep.sources.base import read_csv, require_columns, text_column


class Predictor:
    """Predictions of one or more members (members/load.py) for molecules: what each member makes of
    a chunk of SMILES (each featurisation made once among them), their ensemble's mean and spread."""

    def __init__(self, members: list[Member], weights: list[float] | None = None):
        check_same_task(members)
        self.members, self.target_names = members, members[0].target_names
        self.weights = ensemble_weights(weights, len(members))

    def smiles(self, smiles: list[str], batch_size: int) -> tuple[np.ndarray, list[str]]:
        """(outputs [members, n, T], NaN where a molecule was rejected; reason per molecule, "" if
        none: a row without a prediction always has one)."""
        molecules = Molecules(smiles)
        out = np.full((len(self.members), len(smiles), len(self.target_names)), np.nan, np.float32)
        reasons = [""] * len(smiles)
        for m, member in enumerate(self.members):
            out[m], why = member.predict(molecules, batch_size)
            reasons = [mine or theirs for mine, theirs in zip(reasons, why)]
        for row in np.flatnonzero(not_finite(out)):
            reasons[row] = reasons[row] or "prediction_not_finite"
        return out, reasons


def ensemble_of(exports: list[str], weights: list[float] | None) -> tuple[list[Member], list[float]]:
    """The members of every export (an ensemble export gives its own, with its weights), and each
    member's weight: its export's --weights share times its weight within that export."""
    outer = ensemble_weights(weights, len(exports))
    members, inner = [], []
    for share, path in zip(outer, exports):
        found, found_weights = load_members(not_a_fit_folder(Path(path)))
        members += found
        inner += [share * w for w in found_weights]
    return members, inner


def not_a_fit_folder(path: Path) -> Path:
    """`path`, unless it is a `gtscale fit` folder (no export itself, an export in its export/):
    a UserError pointing at that export."""
    from gtscale.models.export import ENSEMBLE_FILE, FILES, TARGETS_FILE

    holds = (*FILES, ENSEMBLE_FILE, TARGETS_FILE)
    if path.is_dir() and not any((path / name).exists() for name in holds) and any((path / "export" / name).is_file() for name in holds):
        raise UserError(f"{path}: a `gtscale fit` folder, not an export; its model is {path / 'export'} (name that folder)")
    return path


def not_finite(values: np.ndarray) -> np.ndarray:
    """bool [n]: the molecules of predictions [members, n, T] that some member gives NaN or inf
    (a rejected molecule, or a model's output that is no number): rows that need a reason."""
    return ~np.isfinite(values).all(axis=(0, 2))


def predict_table(predictor: Predictor, frame: pd.DataFrame, smiles_column: str, batch_size: int, progress: bool) -> pd.DataFrame:
    """The input rows with prediction columns and a reason column."""
    empty = np.zeros((len(predictor.members), 0, len(predictor.target_names)), np.float32)
    taken = [c for c in [*prediction_columns(empty, predictor.target_names).columns, "reason"] if c in frame.columns]
    if taken:
        raise UserError(f"--input has a column {taken[0]!r}, which predict writes; rename it")
    smiles = text_column(frame[smiles_column])
    parts, reasons = [], []
    chunk = batch_size * SORT_WINDOW  # the molecules batched together, by size (inference.padded_batches)
    with tqdm(total=len(smiles), unit="mol", desc="predict", disable=not progress) as bar:
        for start in range(0, len(smiles), chunk):
            values, why = predictor.smiles(smiles[start : start + chunk], batch_size)
            parts.append(values)
            reasons += why
            bar.update(len(why))
    values = np.concatenate(parts, axis=1) if parts else empty
    columns = prediction_columns(values, predictor.target_names, predictor.weights)
    return pd.concat([frame.reset_index(drop=True), columns, pd.DataFrame({"reason": reasons})], axis=1)


def prediction_columns(values: np.ndarray, names: list[str], weights: np.ndarray | None = None) -> pd.DataFrame:
    """<name>_pred per target (one member), or <name>_mean and <name>_std (an ensemble's weighted
    mean and spread over the members: members/ensemble.py; NaN where any member has none)."""
    if values.shape[0] == 1:
        return pd.DataFrame({f"{name}_pred": values[0, :, t] for t, name in enumerate(names)})
    mean, std = ensemble(values, weights)
    return pd.DataFrame({column: block[:, t] for t, name in enumerate(names) for column, block in ((f"{name}_mean", mean), (f"{name}_std", std))})


def predict_shards(predictor: Predictor, folder: Path, splits: list[str] | None, batch_size: int, progress: bool) -> pd.DataFrame:
    """split, idx, prediction and reason columns of every record of `splits` (default: every split
    with records) of a shard folder. Model exports read the records as they are; the SVRs read
    each record's SMILES (format/record_meta.py)."""
    from gtscale.format.manifest import load_manifest
    from gtscale.format.record_meta import split_smiles

    manifest = load_manifest(folder)
    splits = shard_splits(manifest, folder, splits)
    for export in predictor.members:
        if not isinstance(export, LoadedExport):
            continue
        made = manifest.get("features", {}).get("graph")
        wanted = export.options.graph_features.manifest() if export.options.graph_features else None
        if wanted and made != wanted:
            raise UserError(f"{folder}: its graph features ({(made or {}).get('generators', 'none')}, or their train statistics) are not "
                            f"the ones {export.path} was trained on ({wanted['generators']}): predict from a CSV of SMILES instead")
    frames = []
    total = sum(manifest["splits"][s]["samples"] for s in splits)
    with tqdm(total=total, unit="mol", desc="predict", disable=not progress) as bar:
        for split in splits:
            molecules, read = None, None
            idx, members = None, []
            for member in predictor.members:
                if isinstance(member, LoadedExport):
                    batches = shard_batches(member, manifest, split, batch_size)
                    member_idx, values = member.predict_batches(counted(batches, bar) if member is predictor.members[0] else batches)
                else:
                    if molecules is None:
                        smiles_idx, smiles = split_smiles(folder, manifest, split)
                        molecules = Molecules(smiles)
                    values, why = member.predict(molecules, batch_size)
                    member_idx, read = smiles_idx, why if read is None else read
                if idx is not None and not np.array_equal(idx, member_idx):
                    raise UserError(f"{folder}: split {split!r} gave its members different records (a shard changed while predicting?)")
                idx = member_idx
                members.append(values)
            if not isinstance(predictor.members[0], LoadedExport):
                bar.update(len(idx))
            values = np.stack(members)
            reasons = np.where(not_finite(values), "prediction_not_finite", "")
            if read is not None:  # a record's SMILES the SVRs could not read: their reason
                reasons = np.where(np.array(read, dtype=object) != "", np.array(read, dtype=object), reasons)
            columns = prediction_columns(values, predictor.target_names, predictor.weights)
            frames.append(pd.concat([pd.DataFrame({"split": split, "idx": idx}), columns, pd.DataFrame({"reason": reasons})], axis=1))
    return pd.concat(frames, ignore_index=True)


def shard_splits(manifest: dict, folder: Path, splits: list[str] | None) -> list[str]:
    """The splits of a shard folder to read: `splits` (--splits), each holding records, else every
    split that holds any."""
    unknown = [s for s in splits or [] if s not in manifest["splits"]]
    if unknown:
        raise UserError(f"--splits: {unknown[0]!r} is not a split of {folder} (has {', '.join(manifest['splits'])})")
    splits = splits or [s for s in manifest["splits"] if manifest["splits"][s].get("samples")]  # all: those with records
    for split in splits:
        if not manifest["splits"][split].get("samples"):
            raise UserError(f"--splits: split {split!r} of {folder} has no records")
    if not splits:
        raise UserError(f"{folder}: no split holds a record")
    return splits


def counted(batches, bar: tqdm):
    """The batches, each counted on the progress bar as it passes."""
    for batch in batches:
        bar.update(batch.num_graphs)
        yield batch


def read_molecule_csv(source: Path, smiles_column: str) -> pd.DataFrame:
    """A user's CSV of molecules, every cell as text, as written (ids keep their zeros, "NA" stays
    "NA"), and every line a row: a blank line is a molecule left empty, so that the output's rows
    stay the input's; a UserError naming the file when it lacks `smiles_column`."""
    frame = read_csv(source, dtype=str, na_filter=False, skip_blank_lines=False)
    require_columns(frame, [smiles_column], source)
    return frame


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
    """Predictions of `exports` (several: an ensemble, weighed by `weights`; an ensemble export
    brings its members) for every row of the CSV `input` (its SMILES in `smiles_column`) or every
    record of the shard folder `input` (`splits` comma-separated, default all), written to the CSV
    `out` (module docstring); (out, the table)."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    if max_nodes is not None and max_nodes < 1:
        raise UserError(f"--max-nodes must be >= 1, got {max_nodes}")
    source = Path(input)
    target = claim_out_file(out, written_by_predict, "--out", read_mark=csv_header, inputs=[source, *exports],
                            overwrite_flag="--overwrite", overwrite=overwrite)
    check_can_write(target, "--out")  # before the work, not after it
    members, member_weights = ensemble_of(exports, weights)
    if max_nodes is not None:
        members = [with_max_nodes(member, max_nodes) for member in members]
    predictor = Predictor(members, member_weights)
    if source.is_dir():
        table = predict_shards(predictor, source, [s for s in splits.split(",") if s] if splits else None, batch_size, progress)
    else:
        frame = read_molecule_csv(source, smiles_column)
        table = predict_table(predictor, frame, smiles_column, batch_size, progress)
    target.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(target):
        atomic_write_text(target, csv_text(table))
    return target, table
