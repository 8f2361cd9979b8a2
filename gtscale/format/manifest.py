"""manifest.json: what a shard directory holds, assembled from the plan and the per-shard parts.

Readers (the loader, `gtscale inspect`) trust nothing else: shard paths are relative to the
manifest's folder and every shard carries its sample count, size and sha256.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.io import atomic_write_text, disk_full_is_user_error

MANIFEST_FILE = "manifest.json"
PLAN_FILE = "plan.json"  # written by every part at its start: what the whole run will produce
PARTS_DIR = "parts"  # one JSON per finished shard
REJECTS_FILE = "rejects.tsv"

# --- task kinds ------------------------------------------------------------------------------
#: manifest task.type of node tasks: labelled target nodes of sampled subgraphs (`gtscale shard
#: graph-ego`, or a graph store sampled online), read as target_y at target_pos.
NODE_TASK = "node_binary_classification"
#: What a manifest without task.type holds. Every type but NODE_TASK (the sharder writes
#: graph_regression or graph_classification) is a graph task: targets y per record.
GRAPH_TASK = "graph"


def task_type(manifest: dict) -> str:
    """The manifest's task.type (GRAPH_TASK when absent)."""
    return manifest.get("task", {}).get("type", GRAPH_TASK)


def is_node_task(manifest: dict | None) -> bool:
    """Whether the manifest's records hold node targets rather than graph targets."""
    return manifest is not None and task_type(manifest) == NODE_TASK


# --- splits ----------------------------------------------------------------------------------
#: Joins split names into one split read as their union: data.train_split "train+valid" trains on
#: both (a refit on every labelled molecule once the number of steps was chosen on valid).
SPLIT_UNION = "+"


def split_parts(split: str) -> list[str]:
    """The splits a split name reads: "train+valid" → ["train", "valid"], "train" → ["train"]."""
    return split.split(SPLIT_UNION)


def missing_split(manifest: dict, split: str) -> str | None:
    """The first split `split` reads that the manifest lacks, or None."""
    splits = manifest.get("splits", {})
    return next((part for part in split_parts(split) if part not in splits), None)


def written_by_gtscale(plan: dict) -> bool:
    """Whether a plan.json or manifest.json is the sharder's own: created_by gtscale, with a run fingerprint."""
    return str(plan.get("created_by", "")).startswith("gtscale ") and bool(re.fullmatch(r"[0-9a-f]{64}", str(plan.get("fingerprint", ""))))


#: What marks a folder as a shard folder gtscale wrote (gtscale.io.claim_out_dir).
SHARD_MARKERS = {PLAN_FILE: written_by_gtscale, MANIFEST_FILE: written_by_gtscale}


def load_manifest(path: str | Path) -> dict:
    """Read a manifest from its file or its folder; one-line errors for missing or malformed ones."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_FILE
    manifest = read_manifest_file(path, f"{path}: no manifest (was `gtscale shard` run, and merged if split into parts?)")
    for key in ("schema_version", "dataset", "splits"):
        if key not in manifest:
            raise UserError(f"{path}: manifest lacks {key!r}")
    check_shard_paths(manifest, path)
    manifest["_dir"] = str(path.parent)
    return manifest


def read_manifest_file(file: Path, missing: str) -> dict:
    """The JSON object of a manifest file (a shard folder's manifest.json, a graph store's
    graph.json); a UserError saying `missing` when there is no such file, one naming the file when
    it holds no JSON object."""
    if not file.is_file():
        raise UserError(missing)
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{file}: malformed manifest ({err})") from err
    if not isinstance(manifest, dict):
        raise UserError(f"{file}: malformed manifest (a JSON {type(manifest).__name__}, not an object)")
    return manifest


def check_shard_paths(manifest: dict, path: Path) -> None:
    """Every shard a manifest lists lies inside its folder: a relative path without `..`.

    A checksum proves a file's bytes, not where it is: a manifest naming `../x.tar` or `/data/x.tar`
    would make the loader read, and `inspect --verify` pass, a file outside the shard folder."""
    if not isinstance(manifest["splits"], dict):
        raise UserError(f"{path}: 'splits' must be a mapping of split names to their shards")
    for split, info in manifest["splits"].items():
        shards = info.get("shards", []) if isinstance(info, dict) else None
        if not isinstance(shards, list) or not all(isinstance(s, dict) and isinstance(s.get("path"), str) for s in shards):
            raise UserError(f"{path}: split {split!r} must list its shards as objects with a 'path'")
        for shard in shards:
            relpath = PurePosixPath(shard["path"])
            if relpath.is_absolute() or PureWindowsPath(shard["path"]).is_absolute() or ".." in relpath.parts or "\\" in shard["path"] or not relpath.parts:
                raise UserError(f"{path}: split {split!r} lists shard {shard['path']!r}; shard paths must be relative and stay inside {path.parent}")


def manifest_entry(manifest: dict, entry: str):
    """The value of `entry` ("section.name", as schema.PRODUCED names them), or None when absent."""
    section, name = entry.split(".")
    return manifest.get(section, {}).get(name)


def check_readable(manifest: dict, keys: tuple[str, ...]) -> None:
    """The shards are of a schema version this code reads, and hold every record key in `keys` as
    far as the manifest tells (schema.PRODUCED's entries); a UserError naming what produces a
    missing key otherwise."""
    where = manifest.get("_dir", "manifest")
    if manifest.get("schema_version") not in schema.READABLE_SCHEMA_VERSIONS:
        raise UserError(f"{where}: shards have schema_version {manifest.get('schema_version')!r}, this loader reads {schema.READABLE_SCHEMA_VERSIONS}; re-shard")
    for key in keys:
        produced = schema.PRODUCED.get(key)
        value = manifest_entry(manifest, produced.entry) if produced is not None and produced.entry else None
        if value is not None and not value:
            raise UserError(f"{where}: the shards hold no {key!r}, which this model needs; it is produced by {produced.how}")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: corrupt ({err}); delete it and rerun the part that writes it") from err


def dedup_order(splits: list[str]) -> list[str]:
    """The order in which copies of a molecule are met: train, then validation splits (val…), then
    the rest by name (plan.json stores splits sorted by name, so dict order cannot decide). The first
    copy is the one --drop-duplicates keeps: evaluation splits lose the molecules training sees."""
    return sorted(splits, key=lambda split: (split != "train", not split.startswith("val"), split))


def count_duplicates(keyed: list[tuple[str, str]]) -> dict:
    """(split, molecule key) per written record in dedup order → how many repeat an earlier record,
    and how many of those repeat one of another split (train/test leakage)."""
    if not keyed:
        return {"molecules": 0, "across_splits": 0}
    splits = np.array([s for s, _ in keyed])
    keys = np.array([int(k, 16) for _, k in keyed], dtype=np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    first_of = first[inverse]
    repeat = first_of != np.arange(len(keys))
    return {"molecules": int(repeat.sum()), "across_splits": int((repeat & (splits != splits[first_of])).sum())}


def duplicate_note(manifest: dict) -> str | None:
    """A warning line when the written records hold repeated molecules."""
    dup = manifest.get("duplicates", {})
    if not dup.get("molecules"):
        return None
    order = ", ".join(dedup_order(list(manifest["splits"])))
    return (
        f"warning: {dup['molecules']} records repeat an earlier molecule (same canonical SMILES), {dup['across_splits']} of them "
        f"in another split than its first copy; --drop-duplicates keeps only the first copy (splits in order {order})"
    )


def merge_parts(out_dir: Path) -> dict:
    """Assemble manifest.json and rejects.tsv from plan.json and parts/*.json.

    Fails, naming the first missing shard, unless every planned shard of every part is finished."""
    plan_path = out_dir / PLAN_FILE
    if not plan_path.is_file():
        raise UserError(f"{plan_path}: no sharding plan here (run `gtscale shard` first)")
    plan = _read_json(plan_path)
    splits, reject_rows, keys = {}, [], {}
    dropped = plan.get("dropped_duplicates", {})
    for split, info in plan["splits"].items():
        shards, rejected = [], {}
        keys[split] = []
        for name in info["shards"]:
            part_path = out_dir / PARTS_DIR / f"{name}.json"
            part = _read_json(part_path) if part_path.is_file() else None
            if part is None or part.get("fingerprint") != plan["fingerprint"]:
                raise UserError(f"{out_dir / PARTS_DIR}: shard {name} is not finished; run the parts that write it")
            shards.append({k: part[k] for k in ("path", "samples", "bytes", "sha256", "max_nodes")})
            for reason, count in part["rejected"].items():
                rejected[reason] = rejected.get(reason, 0) + count
            reject_rows += [(idx, split, reason) for idx, reason in part["rejects"]]
            keys[split] += [key for _, key in part.get("keys", [])]
        if dropped.get(split):
            rejected["duplicate"] = len(dropped[split])
            reject_rows += [(idx, split, f"duplicate_of:{first}") for idx, first in dropped[split]]
        splits[split] = {
            "rows": info["rows"],
            "samples": sum(s["samples"] for s in shards),
            "rejected": dict(sorted(rejected.items())),
            "shards": shards,
        }
    duplicates = count_duplicates([(split, key) for split in dedup_order(list(keys)) for key in keys[split]])
    duplicates["dropped"] = sum(len(rows) for rows in dropped.values())
    manifest = {k: v for k, v in plan.items() if k not in ("splits", "dropped_duplicates")} | {"splits": splits, "duplicates": duplicates}
    with disk_full_is_user_error(out_dir / MANIFEST_FILE):
        atomic_write_text(out_dir / REJECTS_FILE, "idx\tsplit\treason\n" + "".join(f"{i}\t{s}\t{r}\n" for i, s, r in sorted(reject_rows, key=lambda row: (row[1], row[0]))))
        atomic_write_text(out_dir / MANIFEST_FILE, json.dumps(manifest, indent=1, sort_keys=True))
    manifest["_removed"] = remove_unlisted(out_dir, manifest)
    return manifest


#: Names the sharder gives its own files: <split>/<split>-NNNNNN.tar (.tmp while written), parts/<split>-NNNNNN.json.
_SHARD_NAME = re.compile(r"(?P<split>[^/]+)/(?P=split)-\d{6}\.tar(\.tmp)?")
_PART_NAME = re.compile(r".+-\d{6}\.json")


def remove_unlisted(out_dir: Path, manifest: dict) -> list[str]:
    """Delete the shards and part files of an earlier plan that this manifest does not list.

    A rerun with another plan (a smaller --shard-size, fewer molecules) would otherwise leave old
    shards beside the new ones, where a glob or a user would take them for data. Removing them
    rather than refusing the rerun: only what the sharder provably wrote is touched (a tar whose
    part file names it, that part file, a .tar.tmp of the sharder's naming), and only after the new
    manifest, which no longer lists them, is in place. A user's file that merely looks like a shard
    stays. Returns the paths removed."""
    listed = {s["path"] for info in manifest["splits"].values() for s in info["shards"]}
    parts = {f"{Path(p).stem}.json" for p in listed}
    stale = [p for p in (out_dir / PARTS_DIR).glob("*.json") if _PART_NAME.fullmatch(p.name) and p.name not in parts]
    written = {_part_path(p) for p in stale} - {None}
    for path in out_dir.glob("*/*.tar*"):
        relpath = path.relative_to(out_dir).as_posix()
        if _SHARD_NAME.fullmatch(relpath) and relpath not in listed and (relpath.endswith(".tmp") or relpath in written):
            stale.append(path)
    for path in stale:
        path.unlink(missing_ok=True)
    for folder in {p.parent for p in stale}:
        if folder.name != PARTS_DIR and not any(folder.iterdir()):
            folder.rmdir()  # the folder of a split the new plan does not have
    return sorted(str(p) for p in stale)


def _part_path(part_file: Path) -> str | None:
    """The shard path a part file records (None for one that does not parse)."""
    try:
        return str(json.loads(part_file.read_text()).get("path"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
