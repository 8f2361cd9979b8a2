"""`gtscale predict EXPORT… --input mols.csv --out preds.csv`: predictions of one export (or an ensemble's
mean and std) for a CSV of SMILES or a shard folder (predict.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gtscale.errors import UserError
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exports", nargs="+", help="export folders (model.pt, model.yaml, export.json); several = an ensemble")
    parser.add_argument("--input", required=True,
                        help="a .csv of SMILES (optionally .gz, .bz2, .xz, a one-file .zip, or .zst with the zstandard module), "
                        "or a shard folder (manifest.json)")
    parser.add_argument("--smiles-column", default="smiles", help="SMILES column of the CSV (default smiles)")
    parser.add_argument("--splits", default=None, help="shard folder: comma-separated splits to predict (default: every split with records)")
    parser.add_argument("--out", required=True, help="CSV to write (atomically); replaces only a CSV predict wrote")
    parser.add_argument("--overwrite", action="store_true", help="replace --out even if predict did not write it (never the input)")
    parser.add_argument("--max-nodes", type=int, default=None,
                        help=f"most atoms a molecule may have; larger ones get reason too_many_nodes before RDKit parses them "
                        f"(default: the export's shards' --max-nodes, else {DEFAULT_MAX_ATOMS})")
    parser.add_argument("--batch-size", type=int, default=64, help="molecules per batch (default 64)")
    parser.add_argument("--weights", type=float, nargs="+", default=None, metavar="W",
                        help="one weight per export for the ensemble's mean and std: finite, >= 0, not all 0 (default: equal)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_paths(exports: list[str], source: str) -> None:
    """A missing export or input is one line before predict's imports (torch: most of a second)."""
    for export in exports:
        if not Path(export).exists():
            raise UserError(f"{export}: no such export folder (write it with `gtscale export` or `gtscale import-checkpoint`)")
    if not Path(source).exists():
        raise UserError(f"{source}: source file not found")


def run(args: argparse.Namespace) -> int:
    check_paths(args.exports, args.input)
    from gtscale.predict import predict

    out, table = predict(args.exports, args.input, args.out, smiles_column=args.smiles_column, splits=args.splits,
                         overwrite=args.overwrite, max_nodes=args.max_nodes, batch_size=args.batch_size, weights=args.weights,
                         progress=not args.no_progress)
    failed = int((table["reason"] != "").sum())
    print(f"wrote {len(table)} rows to {out}" + (f" ({failed} without a prediction: see the reason column)" if failed else ""))
    return 0
