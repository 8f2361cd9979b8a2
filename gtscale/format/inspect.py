"""What a shard directory holds, and whether it is intact (`gtscale inspect PATH [--verify]`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.format.shardfile import ShardError, inside_folder
from gtscale.io import sha256_file
from gtscale.format.tario import iter_shard


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def summary(manifest: dict) -> list[str]:
    lines = [
        f"dataset {manifest['dataset']}  schema v{manifest['schema_version']}  task {manifest.get('task', {}).get('type')} "
        f"({manifest.get('task', {}).get('num_targets')} targets)",
        "transform " + ", ".join(f"{k}={v}" for k, v in sorted(manifest.get("transform", {}).items())),
        f"{'split':<16}{'samples':>10}{'shards':>8}{'bytes':>12}  rejected",
    ]
    for split, info in manifest["splits"].items():
        rejected = ", ".join(f"{k}: {v}" for k, v in info["rejected"].items()) or "-"
        size = sum(s["bytes"] for s in info["shards"])
        lines.append(f"{split:<16}{info['samples']:>10}{len(info['shards']):>8}{_human(size):>12}  {rejected}")
    return lines


def describe_record(key: str, record: dict) -> list[str]:
    lines = [f"record {key}: meta {record.get('meta')}"]
    for field, value in sorted(record.items()):
        if isinstance(value, np.ndarray):
            lines.append(f"  {field:<12} {str(value.dtype):<8} {str(tuple(value.shape)):<14}")
    return lines


def read_problem(path: Path) -> str | None:
    """None when every record of the shard decodes; else why not (truncated, corrupt, a pickle)."""
    try:
        for _ in iter_shard(path):
            pass
    except (ShardError, ValueError, EOFError, OSError) as err:  # ValueError: a bad .npy header, an object array, bad JSON
        return f"unreadable ({err})"
    return None


def verify_shard(root: Path, shard: dict) -> str | None:
    """One line naming the shard when it does not match its manifest entry, else None."""
    try:
        path = inside_folder(root, shard["path"])
    except ShardError as err:
        return str(err)
    if not path.is_file():
        return f"{path}: missing"
    if sha256_file(path) != shard["sha256"]:
        return f"{path}: sha256 differs from the manifest"
    try:
        count = sum(1 for _ in iter_shard(path))
    except (ShardError, ValueError, EOFError, OSError) as err:
        return f"{path}: unreadable ({err})"
    if count != shard["samples"]:
        return f"{path}: {count} samples, manifest says {shard['samples']}"
    return None


def verify(manifest: dict) -> tuple[list[str], set[str]]:
    """(one line per problem, paths of the shards that verified)."""
    root = Path(manifest["_dir"])
    problems, good = [], set()
    shards = [s for info in manifest["splits"].values() for s in info["shards"]]
    for shard in tqdm(shards, desc="verify", unit="shard"):
        problem = verify_shard(root, shard)
        if problem:
            problems.append(problem)
        else:
            good.add(shard["path"])
    return problems, good


def preview_split(manifest: dict, requested: str | None) -> str | None:
    """The split whose first record is shown: --split (which must hold shards), else the first with shards."""
    splits = manifest["splits"]
    if requested is None:
        return next((s for s in splits if splits[s]["shards"]), None)
    if requested not in splits:
        raise UserError(f"--split {requested!r}: not in the manifest (has {', '.join(splits)})")
    if not splits[requested]["shards"]:
        raise UserError(f"--split {requested!r}: has no shards in {manifest['_dir']} ({splits[requested].get('samples', 0)} samples)")
    return requested


def preview(path: Path, schema_version: int) -> None:
    for key, record in iter_shard(path, schema_version):
        print("\n".join(describe_record(key, record)))
        break


def inspect_shards(path: str, verify_all: bool = False, split: str | None = None) -> int:
    """Print the summary of the shard folder `path` and the first record of `split` (default: the
    first with shards); with `verify_all`, check every shard first. 1 when a shard failed, else 0."""
    manifest = load_manifest(path)
    print("\n".join(summary(manifest)))
    split = preview_split(manifest, split)
    root = Path(manifest["_dir"])
    shards = [s["path"] for s in manifest["splits"][split]["shards"]] if split else []
    if not verify_all:
        if shards:
            first = inside_folder(root, shards[0])
            if not first.is_file():
                raise UserError(f"{first}: listed in the manifest but missing")
            problem = read_problem(first)
            if problem:
                raise UserError(f"{first}: {problem}; run gtscale inspect --verify to check every shard")
            preview(first, manifest["schema_version"])
        return 0
    # Every shard is checked before anything is decoded for show, so one bad shard cannot hide the rest.
    problems, good = verify(manifest)
    for line in problems:
        print(f"FAIL {line}")
    shown = next((p for p in shards if p in good), None)
    if shown is not None:
        preview(root / shown, manifest["schema_version"])
    elif shards:
        print(f"no shard of split {split!r} verified: no record shown")
    print(f"verify: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0
