"""The sharding driver every kind of shard shares: plan → plan.json → skip verified shards → pool →
one tar and one part file per shard (→ manifest.json, by gtscale.format.manifest.merge_parts).

What a shard holds is the caller's: a `RecordMaker` turns one task (a slice of a split's rows) into
its records. Everything else is here once: the cut into tasks (split s, shard k holds rows
[k·S, (k+1)·S) of the split's list, so a shard's bytes do not depend on the worker count, the part
of a multi-machine run, or how often it was interrupted), the plan, the completeness check, the
process pool, the tar, and the part record written after it; also which --out may be written
(claim_shard_dir) and a full disk as one line with no half-written .tar.tmp left.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tqdm import tqdm

from gtscale import __version__
from gtscale.format import schema
from gtscale.format.manifest import PARTS_DIR, PLAN_FILE, SHARD_MARKERS
from gtscale.format.tario import ShardWriter, sample_key
from gtscale.io import atomic_write_text, claim_out_dir, disk_full_is_user_error, sha256_file


@dataclass(eq=False)  # tasks are told apart by identity: their rows may be arrays
class ShardTask:
    """One shard to write: rows [number·S, (number+1)·S) of `split`'s row list."""

    split: str
    number: int  # shard number within the split
    ordinal: int  # position in the whole plan; part i of P takes ordinal % P == i
    rows: Sequence  # the caller's rows of this shard (molecules, target node ids)

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:06d}"

    @property
    def relpath(self) -> str:
        return f"{self.split}/{self.name}.tar"

    @property
    def part_name(self) -> str:
        return f"{PARTS_DIR}/{self.name}.json"


@dataclass
class ShardRecords:
    """What a RecordMaker makes of one task: the records to write (each with meta idx and
    num_nodes), the rows it rejected as (idx, reason), and extra fields for the part file."""

    records: Iterable[dict]
    rejects: list[tuple[int, str]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


#: task → its records. Must be picklable (a module-level function, or a functools.partial of one),
#: since the pool's workers receive it with every task.
RecordMaker = Callable[[ShardTask], ShardRecords]


def claim_shard_dir(out_dir: Path, inputs: Iterable = ()) -> Path:
    """Refuse an --out that holds anything but an earlier run's shards, or lies in the input (gtscale.io.claim_out_dir)."""
    return claim_out_dir(out_dir, SHARD_MARKERS, inputs)


def plan_tasks(splits: dict[str, Sequence], shard_size: int, make_task: Callable[..., ShardTask] = ShardTask) -> list[ShardTask]:
    """The shard tasks of every split, in plan order (`make_task(split, number, ordinal, chunk)`)."""
    tasks = []
    for split, rows in splits.items():
        for number, start in enumerate(range(0, len(rows), shard_size)):
            tasks.append(make_task(split, number, len(tasks), rows[start : start + shard_size]))
    return tasks


def write_plan(out_dir: Path, run_fingerprint: str, tasks: list[ShardTask], rows: dict[str, int], fields: dict) -> dict:
    """plan.json: what the whole run will produce; `fields` are the dataset's own (dataset, sources,
    transform, task, features…), the rest (fingerprint, version, splits) is the driver's."""
    plan = {
        "fingerprint": run_fingerprint,
        "created_by": f"gtscale {__version__}",
        "schema_version": schema.SCHEMA_VERSION,
        **fields,
        "splits": {split: {"rows": int(n), "shards": [t.name for t in tasks if t.split == split]} for split, n in rows.items()},
    }
    # plan.json before any other file: a part of the same run starting now sees a folder it may claim.
    out_dir.mkdir(parents=True, exist_ok=True)
    with disk_full_is_user_error(out_dir / PLAN_FILE):
        atomic_write_text(out_dir / PLAN_FILE, json.dumps(plan, indent=1, sort_keys=True))
    (out_dir / PARTS_DIR).mkdir(exist_ok=True)
    return plan


def write_shard(task: ShardTask, make_records: RecordMaker, out_dir: Path, run_fingerprint: str) -> dict:
    """Write one shard's tar, then its part record (sample count, bytes, sha256, rejects); return the part."""
    made = make_records(task)
    max_nodes = 0
    with disk_full_is_user_error(out_dir / task.relpath), ShardWriter(out_dir / task.relpath) as writer:
        for record in made.records:
            meta = record[schema.META]
            writer.write(sample_key(meta["idx"]), record)
            max_nodes = max(max_nodes, meta["num_nodes"])
        stats = writer.close()
    reasons: dict[str, int] = {}
    for _, reason in made.rejects:
        reasons[reason] = reasons.get(reason, 0) + 1
    part = {
        "fingerprint": run_fingerprint,
        "split": task.split,
        "number": task.number,
        "path": task.relpath,
        **stats,
        "max_nodes": max_nodes,
        "rejected": dict(sorted(reasons.items())),
        "rejects": made.rejects,
        **made.extra,
    }
    with disk_full_is_user_error(out_dir / task.part_name):
        atomic_write_text(out_dir / task.part_name, json.dumps(part, sort_keys=True))
    return part


def is_complete(task: ShardTask, out_dir: Path, run_fingerprint: str) -> bool:
    """A shard is kept when its part file belongs to this run and the tar verifies against it."""
    part_path = out_dir / task.part_name
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


def init_worker() -> None:
    # One BLAS thread per worker: the workers already use every core.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def _write_counted(write: Callable[[ShardTask], dict], task: ShardTask) -> tuple[int, dict]:
    return len(task.rows), write(task)


def run_tasks(
    tasks: list[ShardTask],
    make_records: RecordMaker,
    out_dir: Path,
    run_fingerprint: str,
    workers: int = 1,
    part: int = 0,
    num_parts: int = 1,
    progress: bool = True,
    desc: str = "shard",
    unit: str = "rec",
    warm_up: Callable[[], None] | None = None,
) -> list[dict]:
    """Write this part's shards that are not already complete; return the part records of all of
    this part's shards (the kept ones read back from their part files). `warm_up` runs once before
    a pool forks: what each worker would otherwise compile or load for itself."""
    mine = [t for t in tasks if t.ordinal % num_parts == part]
    pending = [t for t in mine if not is_complete(t, out_dir, run_fingerprint)]
    done = [json.loads((out_dir / t.part_name).read_text()) for t in mine if t not in pending]
    bar = tqdm(total=sum(len(t.rows) for t in pending), unit=unit, desc=desc, disable=not progress, smoothing=0.1)
    work = partial(_write_counted, partial(write_shard, make_records=make_records, out_dir=out_dir, run_fingerprint=run_fingerprint))
    pool = None
    if workers > 1 and len(pending) > 1:
        if warm_up is not None:
            warm_up()
        pool = mp.get_context("fork").Pool(workers, initializer=init_worker)
        results = pool.imap_unordered(work, pending)
    else:
        init_worker()
        results = map(work, pending)
    try:
        for count, record in results:
            done.append(record)
            bar.update(count)
    except BaseException:
        if pool is not None:
            pool.terminate()  # stops the other workers mid-shard: their temporaries are removed below
            pool.join()
        for task in pending:
            (out_dir / f"{task.relpath}.tmp").unlink(missing_ok=True)
        raise
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
    return done
