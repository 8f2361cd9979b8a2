"""manifest.json: what a shard directory holds, assembled from the plan and the per-shard parts.

Readers (the loader, `gtscale inspect`) trust nothing else: shard paths are relative to the
manifest's folder and every shard carries its sample count, size and sha256.
"""

from __future__ import annotations

import json
from pathlib import Path

from gtscale.errors import UserError
from gtscale.io import atomic_write_text
MANIFEST_FILE = "manifest.json"
PLAN_FILE = "plan.json"  # written by every part at its start: what the whole run will produce
PARTS_DIR = "parts"  # one JSON per finished shard
REJECTS_FILE = "rejects.tsv"


def load_manifest(path: str | Path) -> dict:
    """Read a manifest from its file or its folder; one-line errors for missing or malformed ones."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_FILE
    if not path.is_file():
        raise UserError(f"{path}: no manifest (was `gtscale shard` run, and merged if split into parts?)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: malformed manifest ({err})") from err
    for key in ("schema_version", "dataset", "splits"):
        if key not in manifest:
            raise UserError(f"{path}: manifest lacks {key!r}")
    manifest["_dir"] = str(path.parent)
    return manifest


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: corrupt ({err}); delete it and rerun the part that writes it") from err


def merge_parts(out_dir: Path) -> dict:
    """Assemble manifest.json and rejects.tsv from plan.json and parts/*.json.

    Fails, naming the first missing shard, unless every planned shard of every part is finished."""
    plan_path = out_dir / PLAN_FILE
    if not plan_path.is_file():
        raise UserError(f"{plan_path}: no sharding plan here (run `gtscale shard` first)")
    plan = _read_json(plan_path)
    splits, reject_rows = {}, []
    for split, info in plan["splits"].items():
        shards, rejected = [], {}
        for name in info["shards"]:
            part_path = out_dir / PARTS_DIR / f"{name}.json"
            part = _read_json(part_path) if part_path.is_file() else None
            if part is None or part.get("fingerprint") != plan["fingerprint"]:
                raise UserError(f"{out_dir / PARTS_DIR}: shard {name} is not finished; run the parts that write it")
            shards.append({k: part[k] for k in ("path", "samples", "bytes", "sha256", "max_nodes")})
            for reason, count in part["rejected"].items():
                rejected[reason] = rejected.get(reason, 0) + count
            reject_rows += [(idx, split, reason) for idx, reason in part["rejects"]]
        splits[split] = {
            "rows": info["rows"],
            "samples": sum(s["samples"] for s in shards),
            "rejected": dict(sorted(rejected.items())),
            "shards": shards,
        }
    manifest = {k: v for k, v in plan.items() if k != "splits"} | {"splits": splits}
    atomic_write_text(out_dir / REJECTS_FILE, "idx\tsplit\treason\n" + "".join(f"{i}\t{s}\t{r}\n" for i, s, r in sorted(reject_rows, key=lambda row: (row[1], row[0]))))
    atomic_write_text(out_dir / MANIFEST_FILE, json.dumps(manifest, indent=1, sort_keys=True))
    return manifest
