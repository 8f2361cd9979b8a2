"""Parallel, resumable, deterministic conversion of a `MoleculeTable` into WebDataset shards.

What is molecular is here: the plan of a MoleculeTable's rows, the fingerprint (code, options,
sources), the records of a molecule (featurize → structure) and --drop-duplicates. Planning,
skipping verified shards, the worker pool, tars and part files are gtscale.prep.driver's, shared
with the ego-subgraph shards of a graph store.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import multiprocessing as mp
import tempfile
import tokenize
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import rdkit

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.prep import featurize, floyd_warshall, graph_features, structure
from gtscale.prep.featurize import FeaturizeError, featurize_parsed, molecule_key, parse_smiles
from gtscale.prep.molecule_limits import size_reason
from gtscale.prep.sources.base import MoleculeTable
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.format.manifest import PARTS_DIR, dedup_order
from gtscale.io import sha256_file
from gtscale.prep import driver
from gtscale.prep.driver import ShardRecords, ShardTask, init_worker, write_shard
from gtscale.format.target_stats import TARGET_STATS, split_target_stats


@dataclass(frozen=True)
class ShardOptions:
    structure: StructureOptions = StructureOptions()
    shard_size: int = 10_000  # records planned per shard (rejected ones leave it a little smaller)
    max_nodes: int | None = None  # molecules with more atoms are rejected as too_many_nodes (molecule_limits: before parsing)
    drop_duplicates: bool = False  # keep only the first copy of a molecule (manifest.dedup_order)
    graph_features: graph_features.GraphFeatures | None = None  # molecule-level features (graph_feat), with their train statistics


@dataclass(eq=False)
class MoleculeTask(ShardTask):
    """A shard of molecules: `rows` are its SMILES, with their idx, targets and (text ids) names."""

    idx: np.ndarray = None
    targets: np.ndarray = None
    names: list[str] | None = None
    keys: list[str | None] | None = None  # molecule keys already computed (--drop-duplicates): not computed again

    @property
    def smiles(self) -> list[str]:
        return self.rows


def plan_tasks(table: MoleculeTable, shard_size: int, keys: list[str | None] | None = None) -> list[MoleculeTask]:
    """The shard tasks of a table; `keys`: each row's molecule key, where already computed."""
    def task(split: str, number: int, ordinal: int, chunk: np.ndarray) -> MoleculeTask:
        names = [table.names[r] for r in chunk] if table.names is not None else None
        task_keys = [keys[r] for r in chunk] if keys is not None else None
        return MoleculeTask(split, number, ordinal, [table.smiles[r] for r in chunk], table.idx[chunk], table.targets[chunk], names, task_keys)

    return driver.plan_tasks(table.splits, shard_size, task)


#: The modules whose code decides the values in a record (SCHEMA_VERSION covers the layout);
#: code_version adds featurize_rows, which assembles a record from them (its meta included).
RECORD_CODE = (featurize, structure, floyd_warshall, graph_features)


def code_version() -> str:
    """sha256 of the record-making code and the RDKit that parses the SMILES.

    A hash rather than a constant bumped by hand: a featurizer or structure fix that forgets the
    bump would keep the old shards as complete, silently. The hash is of the token stream without
    comments or blank lines, so editing a comment does not redo a dataset's shards; tokens, unlike
    ast.dump, read the same on every Python version, so parts on different machines agree."""
    digest = hashlib.sha256(f"rdkit {rdkit.__version__}".encode())
    for code in (*RECORD_CODE, featurize_rows):
        source = inspect.getsource(code)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                digest.update(f"{token.type}:{token.string}\n".encode())
    return digest.hexdigest()


def fingerprint(table: MoleculeTable, options: ShardOptions, source_checksums: dict[str, str]) -> str:
    """Identifies what a run produces: a shard made under another fingerprint is redone, not kept.
    The table's content counts beside its sources': the same file read with other target, SMILES
    or id columns, another task type or split makes other records."""
    blob = json.dumps(
        # Sources by content: parts started with different spellings of --root still agree.
        {
            "schema": schema.SCHEMA_VERSION,
            "code": code_version(),
            "dataset": table.name,
            "options": asdict(options),
            "sources": sorted(source_checksums.values()),
            "table": table_digest(table),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def table_digest(table: MoleculeTable) -> str:
    """sha256 of what of a table becomes records: SMILES, idx, names, targets (their columns' names
    and task type) and splits."""
    digest = hashlib.sha256(json.dumps([table.target_names, table.task_type, table.names]).encode())
    digest.update("\n".join(table.smiles).encode())
    for array in (table.idx.astype(np.int64), np.ascontiguousarray(table.targets, np.float32)):
        digest.update(array.tobytes())
    for split in sorted(table.splits):
        digest.update(split.encode() + np.asarray(table.splits[split], np.int64).tobytes())
    return digest.hexdigest()


def featurize_rows(smiles: list[str], idx: np.ndarray, targets: np.ndarray, names: list[str | None] | None,
                   options: ShardOptions, known_keys: list[str | None] | None = None,
                   with_keys: bool = True) -> tuple[list[dict], list[str | None], list[tuple[int, str]]]:
    """(records, molecule keys, rejects [(idx, reason)]) of the molecules that become graphs: the
    whole record a shard holds, structure included. The one featurisation path: the sharder writes
    these records, `gtscale predict` collates them straight away. `known_keys`: the molecules' keys
    where --drop-duplicates already computed them (the canonical SMILES is ~0.08 ms a molecule);
    `with_keys=False` (predict, which counts no duplicates) leaves every key None. One parse per
    molecule serves its graph, its graph features and its key."""
    graphs, keys, rejects = [], [], []
    names = names if names is not None else [None] * len(smiles)
    known_keys = known_keys if known_keys is not None else [None] * len(smiles)
    for smi, i, y, name, known in zip(smiles, idx, targets, names, known_keys):
        if np.isinf(y).any():  # NaN marks a missing label; ±inf (also 1e39 read as float32) is no value a loss can use
            rejects.append((int(i), "target_not_finite"))
            continue
        if options.max_nodes is not None and (too_large := size_reason(smi, options.max_nodes)):
            rejects.append((int(i), too_large))  # before RDKit parses it: the work per molecule stays bounded
            continue
        try:
            mol = parse_smiles(smi)
            graph = featurize_parsed(mol, smi)
        except FeaturizeError as err:
            rejects.append((int(i), err.reason))
            continue
        except Exception as err:  # RDKit can raise on exotic valences; count, never crash the run
            rejects.append((int(i), f"featurize_error:{type(err).__name__}"))
            continue
        n = len(graph[schema.NODE_FEAT])
        if options.max_nodes is not None and n > options.max_nodes:
            rejects.append((int(i), "too_many_nodes"))
            continue
        if options.graph_features is not None:  # before the key: MolToSmiles leaves its marks on the molecule
            graph[schema.GRAPH_FEAT] = graph_features.compute(mol, options.graph_features)
        try:
            key = known if known is not None else molecule_key(mol) if with_keys else None
        except Exception as err:  # RDKit may fail to write an exotic molecule's SMILES: counted as a featurize error
            rejects.append((int(i), f"featurize_error:{type(err).__name__}"))
            continue
        graph[schema.Y] = np.asarray(y, dtype=np.float32)
        graph[schema.META] = {"idx": int(i), "num_nodes": n, "num_edges": int(graph[schema.EDGE_INDEX].shape[1]), schema.META_SMILES: smi}
        if name is not None:
            graph[schema.META]["name"] = name
        graphs.append(graph)
        keys.append(key)
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for g in graphs], options.structure)
    for graph, extra in zip(graphs, structures):
        graph.update(extra)
    return graphs, keys, rejects


def molecule_records(task: MoleculeTask, options: ShardOptions) -> ShardRecords:
    """Featurize a task's molecules and compute their structure; the rejected ones with their reason."""
    graphs, keys, rejects = featurize_rows(task.smiles, task.idx, task.targets, task.names, options, task.keys)
    kept = [g[schema.META]["idx"] for g in graphs]
    # molecule keys, for counting duplicates at merge
    return ShardRecords(graphs, rejects, {"keys": [[idx, key] for idx, key in zip(kept, keys)]})


def build_shard(task: MoleculeTask, out_dir: Path, options: ShardOptions, run_fingerprint: str) -> dict:
    """Featurize, compute structure and write one shard; return (and save) its part record."""
    return write_shard(task, partial(molecule_records, options=options), out_dir, run_fingerprint)


def _key_or_none(smiles: str) -> str | None:
    try:
        return molecule_key(parse_smiles(smiles))
    except Exception:  # unparsable: the shard task rejects it with its reason
        return None


def drop_duplicate_rows(table: MoleculeTable, workers: int) -> tuple[MoleculeTable, dict[str, list[list[int]]], list[str | None]]:
    """(table without repeated molecules, split → [[idx, idx of the copy kept], …] of the rows dropped,
    every row's molecule key: None where it does not parse), the keys for the shard tasks to reuse.

    The first copy in dedup_order is kept (train before the other splits), so an evaluation split
    loses the molecules that training sees. Needs every molecule's key before any shard is planned:
    one extra parse per molecule (in `workers` processes), paid only with --drop-duplicates."""
    if workers > 1:
        with mp.get_context("fork").Pool(workers, initializer=init_worker) as pool:
            keys = pool.map(_key_or_none, table.smiles, chunksize=2000)
    else:
        keys = [_key_or_none(s) for s in table.smiles]
    first: dict[str, int] = {}
    splits, dropped = {}, {}
    for split in dedup_order(list(table.splits)):
        keep, gone = [], []
        for row in table.splits[split]:
            key = keys[row]
            if key is not None and key in first:
                gone.append([int(table.idx[row]), int(table.idx[first[key]])])
            else:
                if key is not None:
                    first[key] = row
                keep.append(row)
        splits[split], dropped[split] = np.asarray(keep, dtype=np.int64), gone
    return replace(table, splits={s: splits[s] for s in table.splits}), dropped, keys


def planned_targets(tasks: list[MoleculeTask], table: MoleculeTable) -> dict[str, np.ndarray]:
    """Each split's targets [n, T] of the rows its shard tasks hold (those kept by --drop-duplicates)."""
    empty = np.zeros((0, len(table.target_names)), dtype=np.float32)
    return {split: np.concatenate([empty, *(t.targets for t in tasks if t.split == split)]) for split in table.splits}


def plan_fields(table: MoleculeTable, tasks: list[MoleculeTask], options: ShardOptions, checksums: dict[str, str], dropped: dict[str, list[list[int]]]) -> dict:
    """What plan.json says of a molecule dataset (the driver adds fingerprint, version and splits)."""
    return {
        "dataset": table.name,
        "sources": [{"path": str(p), "sha256": checksums[str(p)], "bytes": p.stat().st_size} for p in table.source_files],
        "transform": {**asdict(options.structure), "graph_features": list(options.graph_features.generators) if options.graph_features else [],
                      "max_nodes": options.max_nodes, "shard_size": options.shard_size, "drop_duplicates": options.drop_duplicates},
        "task": {"type": table.task_type, "num_targets": len(table.target_names), "target_names": table.target_names}
        | ({TARGET_STATS: split_target_stats(planned_targets(tasks, table))} if table.task_type == "graph_regression" else {}),
        "features": {"node": list(schema.ATOM_FEATURE_DIMS), "edge": list(schema.BOND_FEATURE_DIMS)}
        | ({"graph": options.graph_features.manifest()} if options.graph_features else {}),
        "dropped_duplicates": dropped,
    }


def check_out_dir(out_dir: Path, subdirs: list[str]) -> None:
    """Refuse, before anything is written, an --out where a folder we write in is a file or unwritable.

    Each folder the run writes into (out, parts/, one per split) is probed where it exists, or its
    nearest existing parent where it does not: a failure names the folder, and no shard is left
    behind without its part file."""
    for folder in [out_dir, *(out_dir / sub for sub in subdirs)]:
        existing = folder
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise UserError(f"{existing}: --out {out_dir} needs a folder here, but this is a file")
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as err:
            raise UserError(f"{existing}: cannot write in this folder ({err.strerror}); choose another --out") from err


def shard_table(
    table: MoleculeTable,
    out_dir: Path,
    options: ShardOptions,
    workers: int = 1,
    part: int = 0,
    num_parts: int = 1,
    progress: bool = True,
) -> list[dict]:
    """Write this part's shards (skipping verified ones); return the part records of this part."""
    checksums = {str(p): sha256_file(p) for p in table.source_files}
    run_fingerprint = fingerprint(table, options, checksums)
    driver.claim_shard_dir(out_dir, table.source_files)
    check_out_dir(out_dir, [PARTS_DIR, *table.splits])
    kept, dropped, keys = drop_duplicate_rows(table, workers) if options.drop_duplicates else (table, {}, None)
    tasks = plan_tasks(kept, options.shard_size, keys)
    rows = {split: len(r) for split, r in table.splits.items()}
    driver.write_plan(out_dir, run_fingerprint, tasks, rows, plan_fields(table, tasks, options, checksums, dropped))
    return driver.run_tasks(
        tasks, partial(molecule_records, options=options), out_dir, run_fingerprint, workers, part, num_parts, progress,
        desc=f"shard {table.name}" + (f" part {part}/{num_parts}" if num_parts > 1 else ""), unit="mol",
        warm_up=partial(structure.warm_up, options.structure),
    )
