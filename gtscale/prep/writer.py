"""Parallel, resumable, deterministic conversion of a `MoleculeTable` into WebDataset shards.

The work is cut into shard tasks fixed by the data alone: split s, shard k holds rows
[k·S, (k+1)·S) of that split's row list (S = --shard-size), so the bytes of every shard are the
same whatever the worker count, the part of a multi-machine run, or how often it was interrupted.

Each finished shard leaves two things, in this order: the tar (written as .tmp, then renamed) and
`parts/<split>-<k>.json` (its sample count, bytes, sha256 and rejects). A rerun keeps a shard
whose part file matches the run's fingerprint and whose tar still has that size and sha256, and
redoes the rest. The manifest is assembled from the part files once all of them exist.
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
from pathlib import Path

import numpy as np
import rdkit
from tqdm import tqdm

from gtscale import __version__
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.prep import featurize, floyd_warshall, graph_features, structure
from gtscale.prep.featurize import FeaturizeError, featurize_smiles_keyed, molecule_key, parse_smiles
from gtscale.prep.sources.base import MoleculeTable
from gtscale.prep.structure import StructureOptions, structure_many
from gtscale.format.manifest import PARTS_DIR, PLAN_FILE, dedup_order
from gtscale.io import atomic_write_text, sha256_file
from gtscale.format.tario import ShardWriter, sample_key


@dataclass(frozen=True)
class ShardOptions:
    structure: StructureOptions = StructureOptions()
    shard_size: int = 10_000  # records planned per shard (rejected ones leave it a little smaller)
    max_nodes: int | None = None  # molecules with more atoms are rejected as too_many_nodes
    drop_duplicates: bool = False  # keep only the first copy of a molecule (manifest.dedup_order)
    graph_features: graph_features.GraphFeatures | None = None  # molecule-level features (graph_feat), with their train statistics


@dataclass
class ShardTask:
    split: str
    number: int  # shard number within the split
    ordinal: int  # position in the whole plan; part i of P takes ordinal % P == i
    smiles: list[str]
    idx: np.ndarray
    targets: np.ndarray
    names: list[str] | None = None

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:06d}"

    @property
    def relpath(self) -> str:
        return f"{self.split}/{self.name}.tar"


def plan_tasks(table: MoleculeTable, shard_size: int) -> list[ShardTask]:
    tasks = []
    for split, rows in table.splits.items():
        for number, start in enumerate(range(0, len(rows), shard_size)):
            chunk = rows[start : start + shard_size]
            names = [table.names[r] for r in chunk] if table.names is not None else None
            tasks.append(
                ShardTask(split, number, len(tasks), [table.smiles[r] for r in chunk], table.idx[chunk], table.targets[chunk], names)
            )
    return tasks


#: The modules whose code decides the values in a record (SCHEMA_VERSION covers the layout).
RECORD_CODE = (featurize, structure, floyd_warshall, graph_features)


def code_version() -> str:
    """sha256 of the record-making code and the RDKit that parses the SMILES.

    A hash rather than a constant bumped by hand: a featurizer or structure fix that forgets the
    bump would keep the old shards as complete, silently. The hash is of the token stream without
    comments or blank lines, so editing a comment does not redo a dataset's shards; tokens, unlike
    ast.dump, read the same on every Python version, so parts on different machines agree."""
    digest = hashlib.sha256(f"rdkit {rdkit.__version__}".encode())
    for module in RECORD_CODE:
        source = inspect.getsource(module)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                digest.update(f"{token.type}:{token.string}\n".encode())
    return digest.hexdigest()


def fingerprint(table: MoleculeTable, options: ShardOptions, source_checksums: dict[str, str]) -> str:
    """Identifies what a run produces: a shard made under another fingerprint is redone, not kept."""
    blob = json.dumps(
        # Sources by content: parts started with different spellings of --root still agree.
        {
            "schema": schema.SCHEMA_VERSION,
            "code": code_version(),
            "dataset": table.name,
            "options": asdict(options),
            "sources": sorted(source_checksums.values()),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def featurize_rows(smiles: list[str], idx: np.ndarray, targets: np.ndarray, names: list[str | None] | None,
                   options: ShardOptions) -> tuple[list[dict], list[str], list[tuple[int, str]]]:
    """(records, molecule keys, rejects [(idx, reason)]) of the molecules that become graphs: the
    whole record a shard holds, structure included. The one featurisation path: the sharder writes
    these records, `gtscale predict` collates them straight away."""
    graphs, keys, rejects = [], [], []
    names = names if names is not None else [None] * len(smiles)
    for smi, i, y, name in zip(smiles, idx, targets, names):
        if np.isinf(y).any():  # NaN marks a missing label; ±inf (also 1e39 read as float32) is no value a loss can use
            rejects.append((int(i), "target_not_finite"))
            continue
        try:
            graph, key = featurize_smiles_keyed(smi)
        except FeaturizeError as err:
            rejects.append((int(i), err.reason))
            continue
        except Exception as err:  # RDKit can raise on exotic valences; count, never crash the run
            rejects.append((int(i), f"featurize_error:{type(err).__name__}"))
            continue
        n = len(graph[schema.X])
        if options.max_nodes is not None and n > options.max_nodes:
            rejects.append((int(i), "too_many_nodes"))
            continue
        if options.graph_features is not None:
            graph[schema.GRAPH_FEAT] = graph_features.compute(parse_smiles(smi), options.graph_features)
        graph[schema.Y] = np.asarray(y, dtype=np.float32)
        graph[schema.META] = {"idx": int(i), "num_nodes": n, "num_edges": int(graph[schema.EDGE_INDEX].shape[1])}
        if name is not None:
            graph[schema.META]["name"] = name
        graphs.append(graph)
        keys.append(key)
    structures = structure_many([(g[schema.EDGE_INDEX], len(g[schema.X])) for g in graphs], options.structure)
    for graph, extra in zip(graphs, structures):
        graph.update(extra)
    return graphs, keys, rejects


def build_shard(task: ShardTask, out_dir: Path, options: ShardOptions, run_fingerprint: str) -> dict:
    """Featurize, compute structure and write one shard; return (and save) its part record."""
    graphs, keys, rejects = featurize_rows(task.smiles, task.idx, task.targets, task.names, options)
    kept = [g[schema.META]["idx"] for g in graphs]
    with ShardWriter(out_dir / task.relpath) as writer:
        for idx, graph in zip(kept, graphs):
            writer.write(sample_key(idx), graph)
        stats = writer.close()
    reasons: dict[str, int] = {}
    for _, reason in rejects:
        reasons[reason] = reasons.get(reason, 0) + 1
    part = {
        "fingerprint": run_fingerprint,
        "split": task.split,
        "number": task.number,
        "path": task.relpath,
        **stats,
        "max_nodes": max((len(g[schema.X]) for g in graphs), default=0),
        "rejected": dict(sorted(reasons.items())),
        "rejects": rejects,
        "keys": [[idx, key] for idx, key in zip(kept, keys)],  # molecule keys, for counting duplicates at merge
    }
    atomic_write_text(out_dir / PARTS_DIR / f"{task.name}.json", json.dumps(part, sort_keys=True))
    return part


def is_complete(task: ShardTask, out_dir: Path, run_fingerprint: str) -> bool:
    """A shard is kept when its part file belongs to this run and the tar verifies against it."""
    part_path = out_dir / PARTS_DIR / f"{task.name}.json"
    shard_path = out_dir / task.relpath
    if not part_path.is_file() or not shard_path.is_file():
        return False
    try:
        part = json.loads(part_path.read_text())
    except json.JSONDecodeError:
        return False
    return (
        part.get("fingerprint") == run_fingerprint
        and shard_path.stat().st_size == part.get("bytes")
        and sha256_file(shard_path) == part.get("sha256")
    )


def _init_worker() -> None:
    # One BLAS thread per worker: the workers already use every core.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def _run_task(payload: tuple[ShardTask, Path, ShardOptions, str]) -> tuple[int, dict]:
    task = payload[0]
    return len(task.smiles), build_shard(*payload)


def _key_or_none(smiles: str) -> str | None:
    try:
        return molecule_key(parse_smiles(smiles))
    except Exception:  # unparsable: the shard task rejects it with its reason
        return None


def drop_duplicate_rows(table: MoleculeTable, workers: int) -> tuple[MoleculeTable, dict[str, list[list[int]]]]:
    """(table without repeated molecules, split → [[idx, idx of the copy kept], …] of the rows dropped).

    The first copy in dedup_order is kept (train before the other splits), so an evaluation split
    loses the molecules that training sees. Needs every molecule's key before any shard is planned:
    one extra parse per molecule (in `workers` processes), paid only with --drop-duplicates."""
    if workers > 1:
        with mp.get_context("fork").Pool(workers, initializer=_init_worker) as pool:
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
    return replace(table, splits={s: splits[s] for s in table.splits}), dropped


def write_plan(
    table: MoleculeTable,
    tasks: list[ShardTask],
    out_dir: Path,
    options: ShardOptions,
    run_fingerprint: str,
    checksums: dict[str, str],
    dropped: dict[str, list[list[int]]],
) -> dict:
    plan = {
        "fingerprint": run_fingerprint,
        "created_by": f"gtscale {__version__}",
        "schema_version": schema.SCHEMA_VERSION,
        "dataset": table.name,
        "sources": [{"path": str(p), "sha256": checksums[str(p)], "bytes": p.stat().st_size} for p in table.source_files],
        "transform": {**asdict(options.structure), "graph_features": list(options.graph_features.generators) if options.graph_features else [], "max_nodes": options.max_nodes, "shard_size": options.shard_size, "drop_duplicates": options.drop_duplicates},
        "task": {"type": table.task_type, "num_targets": len(table.target_names), "target_names": table.target_names},
        "features": {"node": list(schema.ATOM_FEATURE_DIMS), "edge": list(schema.BOND_FEATURE_DIMS)}
        | ({"graph": options.graph_features.manifest()} if options.graph_features else {}),
        "splits": {split: {"rows": int(len(rows)), "shards": [t.name for t in tasks if t.split == split]} for split, rows in table.splits.items()},
        "dropped_duplicates": dropped,
    }
    atomic_write_text(out_dir / PLAN_FILE, json.dumps(plan, indent=1, sort_keys=True))
    return plan


def check_out_dir(out_dir: Path, subdirs: list[str]) -> None:
    """Refuse, before anything is written, an --out that is a file or a folder we cannot write in.

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
    check_out_dir(out_dir, [PARTS_DIR, *table.splits])
    kept, dropped = drop_duplicate_rows(table, workers) if options.drop_duplicates else (table, {})
    tasks = plan_tasks(kept, options.shard_size)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARTS_DIR).mkdir(exist_ok=True)
    write_plan(table, tasks, out_dir, options, run_fingerprint, checksums, dropped)
    mine = [t for t in tasks if t.ordinal % num_parts == part]
    pending = [t for t in mine if not is_complete(t, out_dir, run_fingerprint)]
    done = [json.loads((out_dir / PARTS_DIR / f"{t.name}.json").read_text()) for t in mine if t not in pending]
    bar = tqdm(
        total=sum(len(t.smiles) for t in pending),
        unit="mol",
        desc=f"shard {table.name}" + (f" part {part}/{num_parts}" if num_parts > 1 else ""),
        disable=not progress,
        smoothing=0.1,
    )
    payloads = [(t, out_dir, options, run_fingerprint) for t in pending]
    if workers <= 1:
        _init_worker()
        results = map(_run_task, payloads)
    else:
        pool = mp.get_context("fork").Pool(workers, initializer=_init_worker)
        results = pool.imap_unordered(_run_task, payloads)
    try:
        for molecules, record in results:
            done.append(record)
            bar.update(molecules)
    finally:
        bar.close()
        if workers > 1:
            pool.terminate()
    return done
