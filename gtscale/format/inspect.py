"""`gtscale inspect PATH [--verify]`: what a shard directory holds, and whether it is intact."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest
from gtscale.format.shardfile import ShardError
from gtscale.io import sha256_file
from gtscale.format.tario import iter_shard


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="shard directory (or its manifest.json)")
    parser.add_argument("--verify", action="store_true", help="check every shard's sha256 and sample count")
    parser.add_argument("--split", default=None, help="split whose first record is shown (default: the first)")


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


def verify(manifest: dict) -> list[str]:
    """One line per problem (empty when every shard matches the manifest)."""
    root = Path(manifest["_dir"])
    problems = []
    shards = [(split, s) for split, info in manifest["splits"].items() for s in info["shards"]]
    for split, shard in tqdm(shards, desc="verify", unit="shard"):
        path = root / shard["path"]
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        if sha256_file(path) != shard["sha256"]:
            problems.append(f"{path}: sha256 differs from the manifest")
            continue
        try:
            count = sum(1 for _ in iter_shard(path))
        except (ShardError, ValueError) as err:  # truncated, corrupt, or holding a pickle
            problems.append(f"{path}: unreadable ({err})")
            continue
        if count != shard["samples"]:
            problems.append(f"{path}: {count} samples, manifest says {shard['samples']}")
    return problems


def run(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.path)
    print("\n".join(summary(manifest)))
    splits = [s for s in manifest["splits"] if manifest["splits"][s]["shards"]]
    split = args.split or (splits[0] if splits else None)
    if split is not None:
        if split not in manifest["splits"]:
            raise UserError(f"--split {split!r}: not in the manifest (has {', '.join(manifest['splits'])})")
        first = Path(manifest["_dir"]) / manifest["splits"][split]["shards"][0]["path"]
        if not first.is_file():
            raise UserError(f"{first}: listed in the manifest but missing")
        for key, record in iter_shard(first):
            print("\n".join(describe_record(key, record)))
            break
    if args.verify:
        problems = verify(manifest)
        for line in problems:
            print(f"FAIL {line}")
        print(f"verify: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        return 1 if problems else 0
    return 0
