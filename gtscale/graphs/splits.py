"""Train / validation / test node splits of an anomaly-detection graph.

- `ratio_split`: as in the BWGNN and Energy Transformer papers: a stratified `train_ratio` of the
  labelled nodes (1 % or 40 % in the papers) for training, the rest stratified 1:2 into validation
  and test (BWGNN: test_size=0.67), seeded; scikit-learn's train_test_split does the drawing, as in
  BWGNN's code. Nodes with unknown labels (−1) are in no split.
- `mask_split`: one column of the masks GADBench stores ([N, 20]: columns 0–9 its 40/20/40 splits,
  10–19 the semi-supervised ones).
"""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError

SPLITS = ("train", "val", "test")


def ratio_split(labels: np.ndarray, train_ratio: float, seed: int) -> dict[str, np.ndarray]:
    from sklearn.model_selection import train_test_split

    if not 0 < train_ratio < 1:
        raise UserError(f"train ratio {train_ratio}: must lie strictly between 0 and 1")
    labelled = np.flatnonzero(np.asarray(labels) >= 0)
    y = np.asarray(labels)[labelled]
    train, rest = train_test_split(labelled, stratify=y, train_size=train_ratio, random_state=seed, shuffle=True)
    y_rest = np.asarray(labels)[rest]
    val, test = train_test_split(rest, stratify=y_rest, test_size=0.67, random_state=seed, shuffle=True)
    return {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}


def mask_split(masks: dict[str, np.ndarray], column: int, store_name: str = "graph store") -> dict[str, np.ndarray]:
    if set(masks) != set(SPLITS):
        raise UserError(f"{store_name}: stores masks for {sorted(masks) or 'no split'}; a mask split needs train, val and test")
    width = min(m.shape[1] for m in masks.values())
    if not 0 <= column < width:
        raise UserError(f"{store_name}: mask column {column} outside 0..{width - 1}")
    return {split: np.flatnonzero(np.asarray(masks[split][:, column])) for split in SPLITS}
