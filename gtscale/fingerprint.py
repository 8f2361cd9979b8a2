"""`gtscale fingerprint EXPORT --input mols.csv|SHARDS --out emb.npy|emb.csv`: what a model makes of
each molecule, the pooled graph representation its backbone hands the task head
(inference.graph_representation: the kernel SVR of `gtscale baseline kernel` reads the same), as a
table for a user's own models (chemprop's `fingerprint`). A top-level module beside predict.py,
whose reading of molecules and exports it shares.

- A CSV is read as predict reads it (predict.read_molecule_csv), each molecule featurised as the
  export's shards were, within the same caps (prep/molecule_limits.py; --max-nodes), and every
  input row gives one output row, in order. A row whose SMILES is not read keeps its place with
  its reason: the CSV's `reason` column (its values empty), a row of NaN in the .npy.
- A shard folder gives every record of the chosen splits (--splits, default all with records),
  split by split, in idx order, read by the loader as evaluation reads them.
- EXPORT is a model export, or a kernel SVR (SVC) export (its backbone's representation); an ECFP
  + SVR (SVC) export has none, and an export of several (ensemble.json, targets.json) names the
  ones to choose from.
- Written whole or not at all. .csv: the input's columns (a shard folder: split, idx), then z_0 …
  z_{d-1}, then reason. .npy: float32 [rows, d] written without pickle, beside <out>.json (the
  export, the input, each row's reason where it has one, a shard folder's split and idx of each
  row, and the .npy's sha256). --out replaces only a file fingerprint wrote (a CSV by its header,
  an .npy by its record's sha256), unless --overwrite; never the input or the export.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from gtscale import __version__
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.inference import LoadedExport, batch_representation, graph_representation, shard_batches
from gtscale.io import atomic_write_bytes, atomic_write_text, claim_out_file, disk_full_is_user_error, read_json_object, sha256_file
from gtscale.fingerprint_export import representation_model
from gtscale.members.load import with_max_nodes
from gtscale.predict import counted, csv_header, csv_text, read_molecule_csv, shard_splits
from gtscale.prep.sources.base import text_column

#: Column of representation dimension k in a CSV.
COLUMN = "z_{}"
_COLUMN = re.compile(r"z_\d+")
#: What marks the record of an .npy this command wrote.
WRITER = "gtscale fingerprint"
NOT_FINITE = "representation_not_finite"


def fingerprint(export: str, input: str, out: str, *, smiles_column: str = "smiles", splits: str | None = None, overwrite: bool = False,
                max_nodes: int | None = None, batch_size: int = 64, progress: bool = True) -> tuple[Path, list[str]]:
    """The representation of every row of the CSV `input` (its SMILES in `smiles_column`) or every
    record of the shard folder `input` (`splits` comma-separated, default all), written to `out`
    (.csv or .npy: module docstring); (out, each row's reason, "" where it has a representation)."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    if max_nodes is not None and max_nodes < 1:
        raise UserError(f"--max-nodes must be >= 1, got {max_nodes}")
    source, target = Path(input), Path(out)
    if target.suffix.lower() not in (".csv", ".npy"):
        raise UserError(f"--out {out}: name a .csv or an .npy file")
    claim(target, [source, Path(export)], overwrite)
    model = representation_model(export)
    if max_nodes is not None:
        model = with_max_nodes(model, max_nodes)
    if source.is_dir():
        rows, z = shard_representations(model, source, [s for s in splits.split(",") if s] if splits else None, batch_size, progress)
        reasons = [""] * len(z)
    else:
        frame = read_molecule_csv(source, smiles_column)
        taken = [c for c in frame.columns if _COLUMN.fullmatch(str(c)) or c == "reason"]
        if taken:
            raise UserError(f"--input has a column {taken[0]!r}, which fingerprint writes; rename it")
        rows = frame
        z, reasons = smiles_representations(model, text_column(frame[smiles_column]), batch_size, progress)
    reasons = [why or (NOT_FINITE if not np.isfinite(values).all() else "") for why, values in zip(reasons, z)]
    z[np.array([bool(why) for why in reasons], bool)] = np.nan
    target.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(target):
        if target.suffix.lower() == ".csv":
            columns = pd.DataFrame(z, columns=[COLUMN.format(k) for k in range(z.shape[1])])
            atomic_write_text(target, csv_text(pd.concat([rows.reset_index(drop=True), columns, pd.DataFrame({"reason": reasons})], axis=1)))
        else:
            record = {"export": str(export), "input": str(source), "rows": len(z), "dim": int(z.shape[1]),
                      "rejected": [[row, why] for row, why in enumerate(reasons) if why]}
            if source.is_dir():
                record |= {"split": rows["split"].tolist(), "idx": rows["idx"].tolist()}
            write_npy(target, z, record)
    return target, reasons


def smiles_representations(model: LoadedExport, smiles: list[str], batch_size: int, progress: bool) -> tuple[np.ndarray, list[str]]:
    """([n, d] representations, NaN where not read; reasons) of the molecules, `batch_size` at a time."""
    parts, reasons = [np.zeros((0, model.model.backbone.graph_dim), np.float32)], []
    with tqdm(total=len(smiles), unit="mol", desc="fingerprint", disable=not progress) as bar:
        for start in range(0, len(smiles), batch_size):
            z, why = graph_representation(model, smiles[start : start + batch_size], batch_size)
            parts.append(z)
            reasons += why
            bar.update(len(why))
    return np.concatenate(parts), reasons


def shard_representations(model: LoadedExport, folder: Path, splits: list[str] | None, batch_size: int,
                          progress: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """(split and idx of each row, [rows, d] representations) of every record of `splits` of a shard folder."""
    from gtscale.format.manifest import load_manifest

    manifest = load_manifest(folder)
    splits = shard_splits(manifest, folder, splits)
    backbone = replace(model, keys=[k for k in model.keys if k != schema.GRAPH_FEAT])  # the head's input, not the backbone's
    rows, parts = [], []
    with tqdm(total=sum(manifest["splits"][s]["samples"] for s in splits), unit="mol", desc="fingerprint", disable=not progress) as bar:
        for split in splits:
            ids, values = [], []
            for batch in counted(shard_batches(backbone, manifest, split, batch_size), bar):
                ids.append(batch.idx.numpy())
                values.append(batch_representation(backbone, batch))
            idx = np.concatenate(ids)
            order = np.argsort(idx)
            rows.append(pd.DataFrame({"split": split, "idx": idx[order]}))
            parts.append(np.concatenate(values)[order])
    return pd.concat(rows, ignore_index=True), np.concatenate(parts)


def record_path(out: Path) -> Path:
    """The JSON record beside an .npy output."""
    return out.with_name(f"{out.name}.json")


def claim(out: Path, inputs: list[Path], overwrite: bool) -> None:
    """Refuse, before any work, an --out (and, for an .npy, its record) that fingerprint did not write."""
    options = dict(inputs=inputs, overwrite_flag="--overwrite", overwrite=overwrite)
    if out.suffix.lower() == ".csv":
        claim_out_file(out, written_by_fingerprint, "--out", read_mark=csv_header, **options)
        return
    claim_out_file(out, lambda record: record.get("written_by") == WRITER, "--out", read_mark=npy_record, **options)
    claim_out_file(record_path(out), lambda record: record.get("written_by") == WRITER, "--out's record", **options)


def written_by_fingerprint(header: list[str]) -> bool:
    """Whether a CSV header is one fingerprint writes: representation columns, then `reason`."""
    return len(header) >= 2 and header[-1] == "reason" and _COLUMN.fullmatch(header[-2]) is not None


def npy_record(path: Path) -> dict | None:
    """The record beside an .npy when it describes these very bytes (its sha256), else None."""
    record = read_json_object(record_path(path))
    return record if record is not None and record.get("sha256") == sha256_file(path) else None


def write_npy(out: Path, z: np.ndarray, record: dict) -> None:
    """float32 z as an .npy without pickle, and its record (with its sha256), each replaced whole."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(z, np.float32), allow_pickle=False)
    data = buffer.getvalue()
    # the record first: a file without a record that vouches for it is never replaced as gtscale's
    atomic_write_text(record_path(out), json.dumps({"written_by": WRITER, "version": __version__, "sha256": hashlib.sha256(data).hexdigest(), **record}))
    atomic_write_bytes(out, data)
