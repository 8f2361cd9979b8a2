"""Molecules that occur more than once in fit's table, found by canonical SMILES (RDKit's, so that
`OCC` and `CCO` are one molecule).

A test molecule that is also in train or valid is a molecule the models trained on: its test
metric flatters them. Fit counts such rows across the splits and within each (report.json
`duplicates`, a warning in the terminal and in report.md), and refuses a test split whose every
molecule is in train (the train file given again as the test file, say). With `--duplicates
aggregate` each molecule becomes one row before the split: its targets averaged (a
classification's by the majority of its labels; a tie leaves the cell blank), placed by a random or
scaffold split as one molecule; given splits (three files, a split column) keep it in the first of
train, valid, test that holds it.
"""

from __future__ import annotations

import sys

import numpy as np

from gtscale.errors import UserError
from gtscale.prep.sources.base import MoleculeTable, scaffold_split, seeded_split

SPLIT_ORDER = ("train", "valid", "test")


def handle_duplicates(table: MoleculeTable, task: str, duplicates: str, split: str, seed: int) -> tuple[MoleculeTable, dict]:
    """(the table, with one row per molecule when `duplicates` is aggregate, split again as `split`
    says when fit made the split; the count of molecules repeated across and within the splits),
    each warning printed; a test split of train's molecules is refused (module docstring)."""
    keys, merged = molecule_keys(table.smiles), 0
    if duplicates == "aggregate":
        table, keys, merged = aggregate(table, keys, task)
        if split in ("random", "scaffold"):  # the split is of molecules, not of rows
            table.splits = seeded_split(len(table.smiles), seed) if split == "random" else scaffold_split(table.smiles, seed)
    counts = count_duplicates(table, keys)
    refuse_test_of_train(table, counts)
    for line in warnings(counts, aggregated=merged > 0):
        print(f"warning: {line}", file=sys.stderr)
    return table, {**counts, "handling": duplicates, "rows_merged": merged}


def molecule_keys(smiles: list[str]) -> list[str | None]:
    """Each SMILES's canonical SMILES; None where the members cannot read it (left out later anyway)."""
    from rdkit import Chem

    from gtscale.prep.featurize import FeaturizeError, parse_smiles
    from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS, size_reason

    keys: list[str | None] = []
    for s in smiles:
        try:
            keys.append(None if size_reason(s, DEFAULT_MAX_ATOMS) else Chem.MolToSmiles(parse_smiles(s)))
        except FeaturizeError:
            keys.append(None)
    return keys


def split_of_rows(table: MoleculeTable) -> dict[int, str]:
    return {int(row): name for name in SPLIT_ORDER for row in table.splits.get(name, [])}


def count_duplicates(table: MoleculeTable, keys: list[str | None]) -> dict:
    """Rows whose molecule another split holds too (`valid_in_train`, `test_in_train`,
    `test_in_valid`: rows of the latter split), rows that repeat an earlier row of their own
    split (`within`), and each split's rows of a readable molecule (`rows`)."""
    members = {name: {keys[r] for r in table.splits[name]} - {None} for name in SPLIT_ORDER}
    counts = {f"{later}_in_{earlier}": int(sum(keys[r] in members[earlier] for r in table.splits[later]))
              for i, later in enumerate(SPLIT_ORDER) for earlier in SPLIT_ORDER[:i]}
    within = {}
    for name in SPLIT_ORDER:
        known = [keys[r] for r in table.splits[name] if keys[r] is not None]
        within[name] = len(known) - len(set(known))
    readable = {name: int(sum(keys[r] is not None for r in table.splits[name])) for name in SPLIT_ORDER}
    return {**counts, "within": within, "rows": readable}


def refuse_test_of_train(table: MoleculeTable, counts: dict) -> None:
    """A test split every molecule of which is in train measures nothing but training molecules."""
    if counts["rows"]["test"] and counts["test_in_train"] == counts["rows"]["test"]:
        where = ", ".join(str(p) for p in table.source_files)
        raise UserError(f"{where}: every one of the {counts['rows']['test']} test molecules is also in the train split (the same file or "
                        "molecules twice?); give a test split of other molecules")


def warnings(counts: dict, aggregated: bool) -> list[str]:
    """The terminal's and report.md's warnings of counts (none when no molecule repeats)."""
    lines = []
    shared = [(counts[f"{later}_in_{earlier}"], later, earlier) for later, earlier in (("test", "train"), ("test", "valid"), ("valid", "train"))]
    for n, later, earlier in shared:
        if n:
            lines.append(f"{n} of {counts['rows'][later]} {later} molecules are also in {earlier}" + (": the test metrics partly measure molecules the models trained on"
                                                                           if later == "test" else ""))
    repeated = {name: n for name, n in counts["within"].items() if n}
    if repeated:
        lines.append("molecules repeated within a split: " + ", ".join(f"{n} in {name}" for name, n in repeated.items()))
    if lines and not aggregated:
        lines[-1] += " (--duplicates aggregate makes each molecule one row, its targets averaged, before the split)"
    return lines


def aggregate(table: MoleculeTable, keys: list[str | None], task: str) -> tuple[MoleculeTable, list[str | None], int]:
    """(the table with one row per molecule, each row's key, how many rows were merged into another).
    A molecule's row is its first row in the first of train, valid, test holding it; its targets the
    mean of its rows' (a classification: their majority label, a tie blank). Unreadable rows stay as
    they are."""
    where = split_of_rows(table)
    rank = {name: i for i, name in enumerate(SPLIT_ORDER)}
    groups: dict[str, list[int]] = {}
    kept: list[int] = []
    for row in sorted(range(len(table.smiles)), key=lambda r: (rank[where[r]], r)):
        key = keys[row]
        if key is None:
            kept.append(row)
        elif key in groups:
            groups[key].append(row)
        else:
            groups[key] = [row]
            kept.append(row)
    first = {rows[0]: rows for rows in groups.values()}
    targets = table.targets[kept].astype(np.float64)
    for i, row in enumerate(kept):
        rows = first.get(row, [row])
        if len(rows) > 1:
            targets[i] = [merge(table.targets[rows, t], task) for t in range(table.targets.shape[1])]
    kept_array = np.array(kept, dtype=np.int64)
    order = np.argsort(kept_array)  # the table's row order
    kept_array, targets = kept_array[order], targets[order]
    splits = {name: np.flatnonzero(np.array([where[int(r)] == name for r in kept_array], bool)).astype(np.int64) for name in SPLIT_ORDER}
    merged = MoleculeTable(name=table.name, smiles=[table.smiles[r] for r in kept_array], idx=np.arange(len(kept_array), dtype=np.int64),
                           targets=targets.astype(table.targets.dtype), target_names=table.target_names, task_type=table.task_type,
                           splits=splits, source_files=table.source_files)
    return merged, [keys[r] for r in kept_array], len(table.smiles) - len(kept_array)


def merge(values: np.ndarray, task: str) -> float:
    """One molecule's target from its rows' (blank cells aside): their mean, or a classification's
    majority label (a tie: blank)."""
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan")
    mean = float(values.mean())
    if task == "classification":
        return float("nan") if mean == 0.5 else float(round(mean))
    return mean
