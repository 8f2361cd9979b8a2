"""Checks on a graph source's arrays, block by block: each failure is one line naming the file and
the first bad row (gtscale.errors.UserError, exit 2)."""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError


def check_edge_ids(src: np.ndarray, dst: np.ndarray, num_nodes: int, start: int, file) -> None:
    """Node ids of edge rows start.. must lie in 0..num_nodes−1."""
    bad = (src < 0) | (src >= num_nodes) | (dst < 0) | (dst >= num_nodes)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    node = int(src[i]) if not 0 <= src[i] < num_nodes else int(dst[i])
    why = "negative" if node < 0 else f"outside 0..{num_nodes - 1}"
    raise UserError(f"{file}: edge row {start + i}: node id {node} is {why}")


def check_features(block: np.ndarray, start: int, file) -> None:
    """Feature rows start.. must be finite."""
    finite = np.isfinite(block).all(axis=1)
    if not finite.all():
        raise UserError(f"{file}: feature row {start + int(np.argmin(finite))} holds NaN or inf")


def labels_int8(values: np.ndarray, file) -> np.ndarray:
    """Labels as int8 in {0, 1, −1 (unknown)}; any other value (NaN, 2, 0.5) names its row."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise UserError(f"{file}: labels have shape {values.shape}; expected [N]")
    ok = np.isin(values, (0, 1, -1))
    if not ok.all():
        i = int(np.argmin(ok))
        raise UserError(f"{file}: label row {i} is {values[i]}; expected 0, 1 or -1 (unknown)")
    return values.astype(np.int8)


def one_hot_labels(values: np.ndarray, file) -> np.ndarray:
    """[N, 2] one-hot labels (T-Finance) → [N] in {0, 1}; a row that is not one-hot names itself."""
    ok = np.isin(values, (0, 1)).all(axis=1) & (values.sum(axis=1) == 1)
    if not ok.all():
        i = int(np.argmin(ok))
        raise UserError(f"{file}: label row {i} is {values[i].tolist()}; expected one-hot [1, 0] or [0, 1]")
    return np.argmax(values, axis=1).astype(np.int8)


def check_lengths(num_nodes: int, features: np.ndarray, labels: np.ndarray, file) -> None:
    if len(features) != num_nodes or len(labels) != num_nodes:
        raise UserError(f"{file}: {num_nodes} nodes but {len(features)} feature rows and {len(labels)} labels")
