"""Train / validation / test node splits of an anomaly-detection graph.

- `ratio_split`: as in the BWGNN and Energy Transformer papers: a stratified `train_ratio` of the
  labelled nodes (1 % or 40 % in the papers) for training, the rest stratified 1:2 into validation
  and test (BWGNN: test_size=0.67), seeded; scikit-learn's train_test_split does the drawing, as in
  BWGNN's code. Nodes with unknown labels (−1) are in no split.
- `mask_split`: one column of the masks GADBench stores ([N, 20]: columns 0–9 its 40/20/40 splits,
  10–19 the semi-supervised ones).

`node_task_section` is the manifest's task section of a node task on such splits, the same for
ego shards (`gtscale shard graph-ego`) and for a store sampled online (graphs/induced.py).
"""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError
from gtscale.format.manifest import NODE_TASK

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


def label_counts(labels: np.ndarray, nodes: np.ndarray) -> dict[str, int]:
    """Nodes per class among `nodes` (labels −1 unknown, 0 normal, 1 anomalous); sorted first, so a
    memory-mapped label array is read in order."""
    counts = np.bincount(np.asarray(labels[np.sort(nodes)], np.int64) + 1, minlength=3)
    return {"unknown": int(counts[0]), "normal": int(counts[1]), "anomalous": int(counts[2])}


def node_task_section(labels: np.ndarray, splits: dict[str, np.ndarray]) -> dict:
    """The manifest's `task` of anomaly detection on these splits' nodes: its label counts per split
    give the trainer's ω = normal / anomalous of the weighted BCE (ET eq. 22), from the train split's."""
    return {"type": NODE_TASK, "num_targets": 1, "target_names": ["anomalous"],
            "label_counts": {split: label_counts(labels, nodes) for split, nodes in splits.items()}}
