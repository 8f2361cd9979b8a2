"""When the trainer evaluates (eval.every) and when it stops early (eval.patience).

Both decisions need no collective of their own: the interval comes from the train loader's
batches per epoch, which is the same on every rank, and the metrics an evaluation returns are
computed on every rank from the same gathered, idx-sorted predictions, so every rank counts the
same evaluations without improvement and stops at the same step (as it already agrees on saving
a new best checkpoint, whose save has barriers).
"""

from __future__ import annotations

from dataclasses import dataclass

#: eval.every's value for one evaluation per pass over the train split.
EPOCH = "epoch"


def eval_interval(every: int | str, batches_per_epoch: int, accumulation: int) -> int:
    """Optimizer steps between evaluations (0 = only at the end): eval.every, or for `epoch` one
    pass over the train split, the loader's batches per rank and epoch over the micro-batches of a
    step. Small sets then get many evaluations, large ones few, with the same config."""
    if every == EPOCH:
        return max(1, batches_per_epoch // accumulation)
    return int(every)


@dataclass
class Patience:
    """Stop after `limit` evaluations in a row without a new best task.metric (0 = never).

    Evaluations during the learning-rate warm-up can set a best but do not count against patience:
    while the rate still rises the validation metric is expected to wander, and on a small set
    evaluated once per epoch, patience could otherwise run out before warm-up ends (MoleculeACE's
    CHEMBL4616_EC50: 15 steps per epoch, patience 5, 100 warm-up steps: every seed stopped at step 90
    with its best at step 15)."""

    limit: int
    since_best: int = 0  # counted evaluations since the last new best (saved in checkpoints)

    def update(self, improved: bool, counts: bool = True) -> None:
        """After an evaluation; `counts`: whether one without improvement uses up patience."""
        if improved:
            self.since_best = 0
        elif counts:
            self.since_best += 1

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.since_best >= self.limit
