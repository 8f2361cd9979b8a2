"""A dataset into shards, as `gtscale shard <dataset> --out DIR …` asks (see writer.py)."""

from __future__ import annotations

import os
from pathlib import Path

from gtscale.errors import UserError
from gtscale.format.manifest import merge_parts
from gtscale.prep import graph_features
from gtscale.prep.datasets import read_dataset
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
from gtscale.prep.sources.smiles import is_smi
from gtscale.prep.structure import StructureOptions
from gtscale.prep.writer import ShardOptions, shard_table


def _check(workers: int, part: int, num_parts: int, shard_size: int, max_nodes: int | None, svd_rank: int, lap_k: int,
           paths: str, spd: bool) -> None:
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if num_parts < 1 or not 0 <= part < num_parts:
        raise UserError(f"--part must be in 0..{num_parts - 1} (got --part {part} --num-parts {num_parts})")
    if shard_size < 1:
        raise UserError(f"--shard-size must be >= 1, got {shard_size}")
    if max_nodes is not None and max_nodes < 1:
        raise UserError(f"--max-nodes must be >= 1, got {max_nodes}")
    if svd_rank < 0 or lap_k < 0:
        raise UserError("--svd-rank and --lap-k must be >= 0")
    if paths != "bfs" and not spd:
        raise UserError(f"--paths {paths} needs shortest paths; drop --no-spd")


def shard_dataset(dataset: str, out: Path, *, workers: int = 1, part: int = 0, num_parts: int = 1, shard_size: int = 10_000,
                  max_nodes: int | None = None, svd_rank: int = 8, lap_k: int = 8, spd: bool = True, degree: bool = True,
                  paths: str = "bfs", drop_duplicates: bool = False, progress: bool = True, graph_features_spec: str = "",
                  targets: str = "given", subset: str | None = None, root: str | None = None, input: str | None = None,
                  smiles_column: str = "smiles", id_column: str | None = None, target_columns: str = "",
                  task_type: str = "graph_regression", split_column: str | None = None,
                  split_seed: int = 0) -> tuple[list[dict], dict | None]:
    """Shard `dataset` into `out` (this machine's `part` of `num_parts`; the dataset's options as
    datasets.read_dataset takes them). The part records written, and the merged manifest when the
    run is one part (else None: `gtscale merge-parts` merges them once every part is done)."""
    _check(workers, part, num_parts, shard_size, max_nodes, svd_rank, lap_k, paths, spd)
    if dataset == "smiles-csv":
        if input and is_smi(Path(input)) and smiles_column == "smiles":
            smiles_column = "0"
        if max_nodes is None:  # a user's file may hold any string: bound the work per molecule
            max_nodes = DEFAULT_MAX_ATOMS
    generators = graph_features.parse_generators(graph_features_spec) if graph_features_spec else ()
    # reads and checks every source before anything is written
    table = read_dataset(dataset, root=root, input=input, subset=subset, smiles_column=smiles_column, id_column=id_column,
                         target_columns=target_columns, task_type=task_type, split_column=split_column, split_seed=split_seed,
                         targets=targets, workers=workers, progress=progress)
    workers = min(workers, os.cpu_count() or 1) if workers > 1 else 1
    features = None
    if generators:  # statistics before any shard: every part computes the same ones from the same train rows
        features = graph_features.fit(generators, graph_features.train_smiles(table.smiles, table.splits), workers, progress)
    options = ShardOptions(
        structure=StructureOptions(spd=spd, degree=degree, svd_rank=svd_rank, lap_k=lap_k, paths=paths),
        shard_size=shard_size,
        max_nodes=max_nodes,
        drop_duplicates=drop_duplicates,
        graph_features=features,
    )
    parts = shard_table(table, out, options, workers=workers, part=part, num_parts=num_parts, progress=progress)
    return parts, merge_parts(out) if num_parts == 1 else None
