"""What `gtscale fit` checks of its input and options before any work, each refusal one line: an
infinite target (named by file, row and column), a target of one value, a scaffold split that cannot
fill its splits (and why), an option the recipe would ignore."""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError
from gtscale.prep.sources.base import MoleculeTable

#: recipe option → the recipes that read it
READERS = {"--seeds": "finetune, large and all", "--finetune-overrides": "finetune, large and all",
           "--init-from": "kernel, landmark, finetune, large and all"}


def refuse_infinite_targets(table: MoleculeTable) -> None:
    """One line naming the first row of the file `table` was read from whose target is infinite
    (inf, or a number beyond float32's range): a blank cell is no value, an infinite one no measurement."""
    rows, columns = np.nonzero(np.isinf(table.targets))
    if len(rows):
        row, t = rows[0], columns[0]
        raise UserError(f"{table.source_files[0]}: data row {row + 1}: target column {table.target_names[t]!r} holds {table.targets[row, t]:g} "
                        f"({len(rows)} such cell(s)); a target is a finite number, or a blank cell for no value")


def check_targets_vary(table: MoleculeTable, task: str) -> None:
    """Before any work: a target that holds one value in every train and valid row has nothing to
    fit (a regression's report would divide by an RMSE of 0, a classifier has one class): one line
    naming the column. How many of each class a classification needs, check_target counts later."""
    rows = np.concatenate([table.splits["train"], table.splits["valid"]])
    for t, name in enumerate(table.target_names):
        values = table.targets[rows, t][np.isfinite(table.targets[rows, t])]
        if len(values) and np.ptp(values) == 0:
            where = ", ".join(str(p) for p in table.source_files)
            need = "targets that vary" if task == "regression" else "both labels, 0 and 1"
            raise UserError(f"{where}: every train and valid row holds {values[0]:g} in target column {name!r}; fit needs {need}")


def scaffold_words(smiles: list[str]) -> str:
    """How the molecules' Bemis–Murcko scaffolds are shared, in words (why a scaffold split fails)."""
    from gtscale.prep.sources.base import scaffold_groups

    groups = scaffold_groups(smiles)
    key, rows = max(groups.items(), key=lambda kv: len(kv[1]))
    name = "none (acyclic)" if key == "" else key
    return f"the {len(smiles)} molecules have {len(groups)} scaffold(s), the largest ({name}) shared by {len(rows)}"


def refuse_unused_options(recipe: str, names: tuple[str, ...], init_from: str | None, seeds: tuple[int, ...] | None,
                          finetune_overrides: tuple[str, ...]) -> None:
    """An option given for a member the recipe (fitting `names`) does not fit would be ignored
    without a word: one line instead."""
    unused = ([] if "finetune" in names else [o for o, given in (("--seeds", seeds), ("--finetune-overrides", finetune_overrides)) if given])
    unused += [] if {"kernel", "landmark", "finetune"} & set(names) or init_from is None else ["--init-from"]
    if unused and recipe == "auto":
        raise UserError(f"{unused[0]}: the members recipe auto plans for this set ({' + '.join(names)}) do not use it; leave it out, "
                        "raise --budget, or choose a --recipe")
    if unused:
        raise UserError(f"{unused[0]}: recipe {recipe} does not use it (only the recipes {READERS[unused[0]]} do); leave it out or choose another --recipe")
