"""What `gtscale fit` wrote in its folder, so that a rerun replaces and removes that alone.

DIR/written.json names every file fit wrote under DIR (its path relative to DIR → the SHA-256 of
what fit wrote). A rerun into DIR

  * refuses, before any work, to write where a file exists that the record does not name (a
    user's file at a path fit would write);
  * replaces the files the record names;
  * removes a file an earlier fit wrote and this one does not, if it still holds what fit wrote; a
    file changed since (a user edited it) is kept, as is every file the record does not name, and a
    folder is removed only once nothing is left in it.

The files a fit is about to write are recorded first without a digest (pending), then with their
digests once written: a fit that ends half-way leaves a record of every file it may have written,
and a pending file is fit's to replace or remove. report.json (what marks DIR as fit's) and this
record are fit's own and not listed.

A folder an earlier fit finished before fit kept this record (report.json with its results, no
written.json) is read as one whose export files in members/ and export/ (gtscale's export file names,
in folders an export marker marks) and report files fit wrote; anything else in it is the user's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from gtscale.errors import UserError
from gtscale.io import atomic_write_text, read_json_object, sha256_file

RECORD, RECORD_FORMAT = "written.json", "gtscale-fit-written"


@dataclass
class Outcome:
    """What a rerun did to the files an earlier fit wrote (paths relative to DIR)."""

    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # path → why it was kept

    def as_dict(self) -> dict:
        return {"replaced": self.replaced, "removed": self.removed, "kept": self.kept}


class WrittenRecord:
    """DIR/written.json, read when a fit starts and kept up to date as it writes."""

    def __init__(self, out: Path, legacy_files: Iterable[str] = ()):
        self.out = out
        self.earlier: dict[str, str | None] = read_record(out)
        if not self.earlier and not (out / RECORD).is_file():
            self.earlier = {path: None for path in legacy_files}
        self.pending: set[str] = set()
        self.now: dict[str, str] = {}
        self.existed: set[str] = set()

    def check(self, paths: Iterable[str]) -> None:
        """Refuse (one line naming the file) any of `paths` that exists and the record does not name."""
        for path in sorted(set(paths)):
            target = self.out / path
            if (target.exists() or target.is_symlink()) and path not in self.earlier:
                raise UserError(f"{target}: gtscale fit would write this file, but it did not write the one there; "
                                "move it away or choose another --out")

    def claim(self, paths: Iterable[str]) -> None:
        """check `paths`, then record them as pending. Called before the work."""
        paths = sorted(set(paths))
        self.check(paths)
        self.existed = {p for p in paths if (self.out / p).is_file()}
        self.pending.update(paths)
        self.save()

    def wrote(self, paths: Iterable[str | Path]) -> None:
        """Record the digests of `paths` (in DIR, or relative to it), which this fit has just written (each claimed before)."""
        for path in paths:
            path = str(Path(path).relative_to(self.out)) if Path(path).is_relative_to(self.out) else str(path)
            if path not in self.pending:
                raise AssertionError(f"fit wrote {path} without claiming it first")
            self.now[path] = sha256_file(self.out / path)
        self.save()

    def retire(self, still_writing: Iterable[str] = ()) -> Outcome:
        """Remove what an earlier fit wrote and this one does not (nor will: `still_writing`),
        where it still holds what fit wrote; folders left empty go too. Returns what was done."""
        keep = set(self.now) | set(still_writing)
        outcome = Outcome(replaced=sorted(p for p in keep if p in self.existed))
        emptied: set[Path] = set()
        for path, digest in sorted(self.earlier.items()):
            target = self.out / path
            if path in keep or not target.is_file():
                continue
            if digest is not None and sha256_file(target) != digest:
                outcome.kept[path] = "changed since gtscale fit wrote it"
                continue
            target.unlink()
            outcome.removed.append(path)
            emptied.update(p for p in target.parents if self.out in p.parents)
        for folder in sorted(emptied, key=lambda p: len(p.parts), reverse=True):  # the deepest first
            if not folder.is_dir():
                continue
            left = list(folder.iterdir())
            if left:
                outcome.kept |= {str(p.relative_to(self.out)): "not written by gtscale fit" for p in left
                                 if p.is_file() and str(p.relative_to(self.out)) not in self.earlier and str(p.relative_to(self.out)) not in keep}
            else:
                folder.rmdir()
        self.earlier = {p: d for p, d in self.earlier.items() if p in keep}  # a file kept as changed is the user's from now on
        self.pending &= set(still_writing)  # what this fit planned and did not write was never there
        self.save()
        return outcome

    def save(self) -> None:
        """The record as it stands: what earlier fits wrote and is still there, what this one
        claimed (pending) and wrote."""
        files: dict[str, str | None] = {p: d for p, d in self.earlier.items() if (self.out / p).is_file()}
        files |= {p: None for p in self.pending}
        files |= self.now
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / RECORD, json.dumps({"format": RECORD_FORMAT, "files": dict(sorted(files.items()))}, indent=1))


def read_record(out: Path) -> dict[str, str | None]:
    """DIR/written.json's files (path → digest, None: pending); none when it is missing or not fit's.
    A path that leaves DIR is never fit's."""
    record = read_json_object(out / RECORD)
    if record is None or record.get("format") != RECORD_FORMAT or not isinstance(record.get("files"), dict):
        return {}
    return {path: digest if isinstance(digest, str) else None for path, digest in record["files"].items()
            if isinstance(path, str) and not Path(path).is_absolute() and ".." not in Path(path).parts}


def legacy_files(out: Path) -> list[str]:
    """The files an earlier fit that kept no record wrote in `out`, as far as they can be told from
    a user's: none unless its report.json holds its results (a finished fit); then the report files
    and, in members/ and export/, gtscale's export file names in folders an export marker marks."""
    from gtscale.fit.report import FIGURES, REPORT, REPORT_MD, TEST_PREDICTIONS
    from gtscale.models.export import ENSEMBLE_FILE, EXPORT_MARKERS, FILES, TARGETS_FILE

    report = read_json_object(out / REPORT)
    if report is None or "targets" not in report or (out / RECORD).is_file():
        return []
    files = [name for name in (REPORT_MD, TEST_PREDICTIONS, *FIGURES.values()) if (out / name).is_file()]
    for root in (out / "members", out / "export"):
        folders = [root, *root.rglob("*")] if root.is_dir() else []
        for folder in folders:
            marked = folder.is_dir() and any(is_ours(mark) for name, is_ours in EXPORT_MARKERS.items()
                                             if (mark := read_json_object(folder / name)) is not None)
            if marked:
                files += [str((folder / name).relative_to(out)) for name in (*FILES, ENSEMBLE_FILE, TARGETS_FILE) if (folder / name).is_file()]
    return files


def remove_if_unused(out: Path, own: set[str]) -> None:
    """Remove the folder `out` a fit made, if it holds nothing but fit's `own` files (its record, an
    unfinished report, its lock) and its record names no file there: a fit refused before its work."""
    entries = list(out.iterdir())
    if any(p.name not in own or not p.is_file() for p in entries) or any((out / p).exists() for p in read_record(out)):
        return
    for entry in entries:
        entry.unlink()
    out.rmdir()
