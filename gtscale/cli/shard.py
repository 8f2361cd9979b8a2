"""`gtscale shard <dataset> --out DIR …`: convert a dataset into shards (prep/shard_dataset.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gtscale.format.manifest import duplicate_note
from gtscale.prep.datasets import DATASETS
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
from gtscale.prep.shard_dataset import shard_dataset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="one of: " + "; ".join(f"{k} ({v})" for k, v in DATASETS.items()))
    parser.add_argument("--root", help="folder holding the downloaded dataset (OGB layout)")
    parser.add_argument("--out", help="output folder (default: shards/<dataset>)")
    parser.add_argument("--workers", type=int, default=1, help="processes on this machine (default 1)")
    parser.add_argument("--part", type=int, default=0, help="which part this process writes, 0-based (SLURM: $SLURM_ARRAY_TASK_ID)")
    parser.add_argument("--num-parts", type=int, default=1, help="parts the run is split into across machines; merge with `gtscale merge-parts`")
    parser.add_argument("--shard-size", type=int, default=10_000, help="records per shard (default 10000)")
    parser.add_argument("--max-nodes", type=int, default=None,
                        help="reject molecules with more atoms than this, before parsing them (default: no limit; "
                        f"smiles-csv, whose SMILES are the user's: {DEFAULT_MAX_ATOMS})")
    parser.add_argument("--svd-rank", type=int, default=8, help="r of EGT's SVD encoding; 0 = off (default 8)")
    parser.add_argument("--lap-k", type=int, default=8, help="Laplacian eigenpairs; 0 = off (default 8)")
    parser.add_argument("--no-spd", action="store_true", help="skip shortest paths and predecessors")
    parser.add_argument("--no-degree", action="store_true", help="skip in/out degrees")
    parser.add_argument(
        "--paths", choices=["bfs", "floyd-warshall"], default="bfs",
        help="which of several tied shortest paths Graphormer's path edges follow: bfs (default) or floyd-warshall, "
        "the authors' choice (microsoft/Graphormer algos.pyx; adds the fw_mid key, for imported Graphormer checkpoints)",
    )
    parser.add_argument(
        "--drop-duplicates", action="store_true",
        help="keep only the first copy of each molecule (canonical SMILES), meeting the splits in the order train, "
        "valid…, then the rest by name (default: keep all, count them in the manifest and warn)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--graph-features", default="",
                        help="molecule-level input features for the task head, comma-separated: morgan2048 (Morgan bits, radius 2), "
                        "morgan2048counts (the same environments counted, as log(1 + count)), "
                        "rdkit2d (RDKit 2D descriptors standardised with the train split's statistics, recorded in the manifest)")
    parser.add_argument("--targets", choices=["given", "rdkit-descriptors", "rdkit-fast"], default="given",
                        help="given: the dataset's own targets; rdkit-descriptors: all of RDKit's descriptors, standardised (pretraining); "
                        "rdkit-fast: the ten cheap ones (MolWt, MolLogP, TPSA, MolMR, counts, FractionCSP3), for corpora of millions")
    parser.add_argument("--dataset", dest="subset", default=None, help="moleculeace: which benchmark set, e.g. CHEMBL214_Ki")
    table = parser.add_argument_group("smiles-csv options")
    table.add_argument("--input", help="the .csv / .smi file (optionally .gz, .bz2, .xz, a one-file .zip, or .zst with the zstandard module)")
    table.add_argument("--smiles-column", default="smiles", help="SMILES column (.smi: by position, default 0)")
    table.add_argument("--id-column", default=None, help="integer id column used as idx (else row numbers)")
    table.add_argument("--target-columns", default="", help="comma-separated target columns")
    table.add_argument("--task-type", choices=["graph_regression", "graph_classification"], default="graph_regression")
    table.add_argument("--split-column", default=None, help="column naming each row's split (else seeded 80/10/10)")
    table.add_argument("--split-seed", type=int, default=0, help="seed of the 80/10/10 split (moleculeace: of the validation carved from train)")


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out or Path("shards") / args.dataset)
    parts, manifest = shard_dataset(
        args.dataset, out_dir, workers=args.workers, part=args.part, num_parts=args.num_parts, shard_size=args.shard_size,
        max_nodes=args.max_nodes, svd_rank=args.svd_rank, lap_k=args.lap_k, spd=not args.no_spd, degree=not args.no_degree,
        paths=args.paths, drop_duplicates=args.drop_duplicates, progress=not args.no_progress, graph_features_spec=args.graph_features,
        targets=args.targets, subset=args.subset, root=args.root, input=args.input, smiles_column=args.smiles_column,
        id_column=args.id_column, target_columns=args.target_columns, task_type=args.task_type, split_column=args.split_column,
        split_seed=args.split_seed)
    written = sum(p["samples"] for p in parts)
    rejected = sum(sum(p["rejected"].values()) for p in parts)
    if manifest is not None:
        if note := duplicate_note(manifest):
            print(note, file=sys.stderr)
        if manifest["_removed"]:
            print(f"removed {len(manifest['_removed'])} shard and part files of an earlier plan that the new manifest does not list")
        dropped = manifest["duplicates"]["dropped"]
        print(f"wrote {written} records in {len(parts)} shards to {out_dir} ({rejected} rejected"
              + (f", {dropped} duplicates dropped" if dropped else "") + "; see rejects.tsv)")
    else:
        print(f"part {args.part}/{args.num_parts}: {written} records in {len(parts)} shards ({rejected} rejected); "
              f"when every part is done: gtscale merge-parts {out_dir}")
    return 0
