"""Which members `gtscale fit` runs, from the size of the set and the CPU budget (`--recipe auto`).

The exact kernel members (an SVR or SVC per target on n × n kernel matrices, their grid
cross-validated) cost time as n² per target and memory as n²; the landmark kernel model
(landmark.py) and the fine-tuned transformer cost time linear in n, once for every target. So:

- while the exact members fit in memory (EXACT_MOLECULES_MAX molecules a target) and their
  estimated time fits the budget: the exact members (`ecfp` and `kernel`), chosen among by
  cross-validation, ECFP4 + SVR (SVC) the baseline. Where both run, the exact kernel predicts
  better than its landmark approximation (docs/results/fit-scaling.md), so only cost moves a set
  off it;
- beyond: the landmark kernel model, and the fine-tuned transformer where the budget leaves it at
  least FINETUNE_MIN_EPOCHS passes over the training molecules, chosen among on the valid split;
  ECFP4 + random forest (scikit-learn) the baseline.

The estimates are rates measured on a 2-core machine (docs/results/fit-scaling.md), for planning:
the report gives each member's measured time beside them. A set whose exact kernel matrices cannot
fit in memory is never given to the exact members, whatever the budget; a recipe named with
--recipe that cannot fit is refused before any work, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from gtscale.errors import UserError

#: Members fitted once for every target column (one model, masked labels), chosen among on the valid split.
ALL_TARGET_MEMBERS = ("landmark", "finetune")
#: Most molecules a target (train + valid) the exact kernel members take: their kernel matrices
#: (n × n float64, about five held at once) stay under about 4 GiB.
EXACT_MOLECULES_MAX = 10_000
#: CPU seconds per (molecule² × target) of the two exact members together (their grid and folds).
EXACT_SECONDS = 4.2e-6
#: CPU seconds per molecule of the landmark kernel model's final fit, per target, and its search's (fixed) seconds.
LANDMARK_SECONDS, LANDMARK_SEARCH_SECONDS = 2.0e-4, 60.0
#: CPU seconds per molecule of ECFP4 + random forest, per target.
FOREST_SECONDS = 4.0e-3
#: Training molecules a CPU second of fine-tuning (forward, backward, step; one process).
FINETUNE_MOLECULES_PER_SECOND = 40.0
#: Fewest and most passes over the training molecules the fine-tuned member is given in auto.
FINETUNE_MIN_EPOCHS, FINETUNE_MAX_EPOCHS = 3, 20
#: The default --budget, CPU minutes: 40 k molecules on 2 cores in about 20 minutes.
DEFAULT_BUDGET = 40.0


@dataclass(frozen=True)
class Plan:
    """The members to fit and why. The fine-tuned member's steps (None: its recipe's), its most seeds
    (None: every one of --seeds) and whether each seed is refitted on train + valid."""

    members: tuple[str, ...]
    baseline: str  # the member scored as the baseline ("ecfp" or "forest")
    notes: tuple[str, ...]  # what runs and what is skipped, with the estimates, for the terminal and the report
    estimate: dict[str, float]  # member → estimated CPU seconds
    finetune_steps: int | None = None
    finetune_seeds: int | None = None
    finetune_refit: bool = True


def plan(recipe: str, recipes: dict[str, tuple[str, ...]], molecules: int, targets: int, train_molecules: int, budget: float,
         batch_size: int = 32) -> Plan:
    """The members of `recipe` (auto: by size and budget, module docstring) for a set of at most
    `molecules` labelled train + valid molecules a target, `targets` target columns and
    `train_molecules` training molecules; `budget` in CPU minutes."""
    if budget <= 0:
        raise UserError(f"--budget: {budget:g} CPU minutes; give a positive number")
    seconds = budget * 60.0
    exact = EXACT_SECONDS * molecules ** 2 * targets
    landmark = LANDMARK_SEARCH_SECONDS + LANDMARK_SECONDS * molecules * targets
    forest = FOREST_SECONDS * molecules * targets
    estimate = {"ecfp": exact / 2, "kernel": exact / 2, "landmark": landmark, "forest": forest}
    if recipe != "auto":
        members = recipes[recipe]
        if {"ecfp", "kernel"} & set(members) and molecules > EXACT_MOLECULES_MAX:
            raise UserError(f"--recipe {recipe}: its exact kernel members hold {molecules:,} × {molecules:,} kernel matrices (over "
                            f"{EXACT_MOLECULES_MAX:,} molecules a target they do not fit in memory); use --recipe auto or landmark")
        baseline = "ecfp" if "ecfp" in members else "forest"
        return Plan(members, baseline, (f"recipe {recipe}: {' + '.join(members)}",), {m: estimate[m] for m in members if m in estimate})
    if molecules <= EXACT_MOLECULES_MAX and exact <= seconds:
        note = (f"{molecules:,} molecules a target × {targets} target(s): the exact kernel members (estimated {exact / 60:.1f} CPU min; "
                f"budget {budget:g})")
        return Plan(("ecfp", "kernel"), "ecfp", (note,), {"ecfp": estimate["ecfp"], "kernel": estimate["kernel"]})
    why = (f"over {EXACT_MOLECULES_MAX:,} molecules a target, their kernel matrices would not fit in memory" if molecules > EXACT_MOLECULES_MAX
           else f"estimated {exact / 60:.1f} CPU min, over the budget of {budget:g}")
    notes = [f"skipped: the exact kernel members ({molecules:,} molecules a target × {targets} target(s): {why})",
             f"landmark kernel model: estimated {landmark / 60:.1f} CPU min", f"baseline ECFP4 + random forest: estimated {forest / 60:.1f} CPU min"]
    left = seconds - landmark - forest
    epoch = train_molecules / FINETUNE_MOLECULES_PER_SECOND
    epochs = min(FINETUNE_MAX_EPOCHS, int(left // epoch)) if epoch > 0 else 0
    members = ("forest", "landmark")
    steps = None
    if epochs >= FINETUNE_MIN_EPOCHS:
        steps = max(1, epochs * train_molecules // batch_size)
        members += ("finetune",)
        estimate["finetune"] = epochs * epoch
        notes.append(f"fine-tuned transformer: one seed, {epochs} passes over {train_molecules:,} training molecules ({steps:,} steps), "
                     f"its best-validation checkpoint (no refit), estimated {epochs * epoch / 60:.1f} CPU min")
    else:
        notes.append(f"skipped: the fine-tuned transformer ({FINETUNE_MIN_EPOCHS} passes over {train_molecules:,} training molecules need "
                     f"about {(FINETUNE_MIN_EPOCHS * epoch + seconds - left) / 60:.0f} CPU min with the rest; --budget {budget:g})")
    return Plan(members, "forest", tuple(notes), {m: estimate[m] for m in members}, steps, finetune_seeds=1, finetune_refit=False)
