"""`gtscale merge-parts DIR`: write manifest.json once every part of a split run is finished
(format/manifest.merge_parts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gtscale.format.manifest import duplicate_note, merge_parts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="the --out folder that the parts wrote to")


def run(args: argparse.Namespace) -> int:
    manifest = merge_parts(Path(args.out))
    if note := duplicate_note(manifest):
        print(note, file=sys.stderr)
    if manifest["_removed"]:
        print(f"removed {len(manifest['_removed'])} shard and part files of an earlier plan that the new manifest does not list")
    total = sum(s["samples"] for s in manifest["splits"].values())
    print(f"{args.out}: manifest.json lists {total} records in {sum(len(s['shards']) for s in manifest['splits'].values())} shards")
    return 0
