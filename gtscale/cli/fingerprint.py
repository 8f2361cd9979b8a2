"""`gtscale fingerprint EXPORT --input mols.csv|SHARDS --out emb.npy|emb.csv`: the pooled graph
representation an export makes of each molecule (fingerprint.py)."""

from __future__ import annotations

import argparse

from gtscale.fingerprint import fingerprint
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export", help="a model export folder, or a kernel SVR export (its backbone's representation)")
    parser.add_argument("--input", required=True,
                        help="a .csv of SMILES (optionally .gz, .bz2, .xz, a one-file .zip, or .zst with the zstandard module), "
                        "or a shard folder (manifest.json)")
    parser.add_argument("--smiles-column", default="smiles", help="SMILES column of the CSV (default smiles)")
    parser.add_argument("--splits", default=None, help="shard folder: comma-separated splits to read (default: every split with records)")
    parser.add_argument("--out", required=True,
                        help="emb.csv: the input's columns, z_0 … z_{d-1} and reason (empty values where a SMILES is not read); "
                        "emb.npy: float32 [rows, d], no pickle, a row of NaN where a SMILES is not read, its reasons in emb.npy.json. "
                        "One row per input row, in order; replaces only a file fingerprint wrote")
    parser.add_argument("--overwrite", action="store_true", help="replace --out even if fingerprint did not write it (never the input)")
    parser.add_argument("--max-nodes", type=int, default=None,
                        help=f"most atoms a molecule may have; larger ones get reason too_many_nodes before RDKit parses them "
                        f"(default: the export's shards' --max-nodes, else {DEFAULT_MAX_ATOMS})")
    parser.add_argument("--batch-size", type=int, default=64, help="molecules per batch (default 64)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    out, reasons = fingerprint(args.export, args.input, args.out, smiles_column=args.smiles_column, splits=args.splits,
                               overwrite=args.overwrite, max_nodes=args.max_nodes, batch_size=args.batch_size, progress=not args.no_progress)
    failed = sum(1 for why in reasons if why)
    print(f"wrote {len(reasons)} rows to {out}" + (f" ({failed} without a representation: see their reasons)" if failed else ""))
    return 0
