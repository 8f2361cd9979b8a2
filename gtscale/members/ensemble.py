"""One prediction from several models of the same task: the seeds of a sweep, the members of a
`gtscale predict` ensemble or of a `gtscale fit` export, the arms of a table's blend.

Members' outputs (tasks' `outputs`: a regression's values, a binary task's probabilities,
chemprop's rule) are averaged with weights, and their spread around that mean is reported beside it.
"""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError


def ensemble_weights(weights: list[float] | np.ndarray | None, members: int, option: str = "--weights", member: str = "export") -> np.ndarray:
    """float64 [members] weights summing to 1: equal by default; else the given ones, refused unless
    finite, non-negative and not all zero. Divided by their largest first: the sum of 1e308 and
    1e308 is inf, which would turn every mean into 0."""
    if weights is None:
        return np.full(members, 1.0 / members)
    w = np.asarray(weights, np.float64)
    if w.shape != (members,) or not np.isfinite(w).all() or (w < 0).any() or not (w > 0).any():
        raise UserError(f"{option}: give one weight per {member} ({members}), finite, >= 0 and not all 0; got {np.atleast_1d(weights).tolist()}")
    w = w / w.max()
    return w / w.sum()


def ensemble(values: np.ndarray, weights: list[float] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(weighted mean, weighted standard deviation (ddof 0)) over the members (the first axis) of
    outputs [members, n, T] (or [members, n]) → float64 [n, T] ([n]) each; NaN where any member has none."""
    w = ensemble_weights(weights, values.shape[0]).reshape(-1, *[1] * (values.ndim - 1))
    v = values.astype(np.float64)
    mean = (w * v).sum(axis=0)
    return mean, np.sqrt((w * (v - mean) ** 2).sum(axis=0))
