"""`gtscale bench … --json FILE`: the figures as JSON, marked as gtscale's so that a rerun may replace
the file, and a file gtscale did not write is never overwritten (gtscale.io.claim_out_file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gtscale.io import atomic_write_text, claim_out_file, read_first_line

CREATED_BY = "created_by"


def _is_bench_file(figures: dict) -> bool:
    return str(figures.get(CREATED_BY, "")).startswith("gtscale bench ")


def claim_json(path: str | os.PathLike | None) -> None:
    """Refuse, before the benchmark runs, a --json path holding a file gtscale did not write."""
    if path is not None:
        claim_out_file(path, _is_bench_file, "--json")


def write_json(path: str | os.PathLike | None, figures: dict, bench: str, indent: int = 1) -> None:
    """Write the figures of `gtscale bench <bench>` to `path` (nothing when None)."""
    if path is None:
        return
    path = claim_out_file(path, _is_bench_file, "--json")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({CREATED_BY: f"gtscale bench {bench}", **figures}, indent=indent, default=str) + "\n")


def _markdown_mark(bench: str) -> str:
    return f"<!-- written by gtscale bench {bench}; a rerun replaces this file -->\n"


def claim_markdown(path: str | os.PathLike | None, bench: str, option: str) -> None:
    """Refuse, before the benchmark runs, an `option` path holding a file gtscale did not write
    (a Markdown report is ours when it starts with the line write_markdown puts first)."""
    if path is not None:
        claim_out_file(path, lambda line: line == _markdown_mark(bench).rstrip("\n"), option, read_mark=read_first_line)


def write_markdown(path: str | os.PathLike, text: str, bench: str, option: str) -> None:
    """Write `gtscale bench <bench>`'s Markdown report to `path`, marked as gtscale's."""
    claim_markdown(path, bench, option)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, _markdown_mark(bench) + text)
