"""The synthetic generator's planted neighbour signal: labels follow the stated rule (recomputed
here with scipy.sparse from the built store), are reproducible by seed, and cap a features-only
model ever lower as the signal's share rises while a model that reads the neighbours' mean is not
capped."""

import numpy as np
import scipy.sparse as sp

from gtscale.cli import main
from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.train.node_task import features_baseline

NODES, EDGES, RATIO = 12_000, 80_000, 0.05


def _store(tmp_path, signal: float, seed: int = 0) -> GraphStore:
    path = tmp_path / f"s{signal}-{seed}"
    build_store(synthetic_source(NODES, EDGES, seed, anomaly_ratio=RATIO, neighbour_signal=signal), path, progress=False)
    return GraphStore.open(path)


def _neighbour_mean_features(store: GraphStore) -> np.ndarray:
    n = store.num_nodes
    adjacency = sp.csr_matrix((np.ones(len(store.indices)), np.asarray(store.indices), np.asarray(store.indptr)), shape=(n, n))
    degree = np.maximum(np.asarray(adjacency.sum(axis=1)).ravel(), 1)
    return (adjacency @ np.asarray(store.features, np.float64)) / degree[:, None]


def _standardised(v: np.ndarray) -> np.ndarray:
    return (v - v.mean()) / v.std()


def test_labels_follow_the_stated_rule(tmp_path):
    store = _store(tmp_path, 0.6)
    w = np.asarray(store.manifest["build"]["source"]["direction_w"])
    own = np.asarray(store.features, np.float64) @ w
    mean = _neighbour_mean_features(store) @ w
    score = np.sqrt(0.4) * _standardised(own) + np.sqrt(0.6) * _standardised(mean)
    expected = score >= np.sort(score)[-round(RATIO * NODES)]
    labels = np.asarray(store.labels)
    assert labels.sum() == round(RATIO * NODES) == store.manifest["labels"]["anomalous"]
    np.testing.assert_array_equal(labels.astype(bool), expected)
    assert abs(np.linalg.norm(w) - 1) < 1e-5 and store.manifest["build"]["source"]["neighbour_signal"] == 0.6


def test_labels_are_reproducible_by_seed(tmp_path):
    first, again, other = _store(tmp_path, 0.5, seed=3), _store(tmp_path / "again", 0.5, seed=3), _store(tmp_path, 0.5, seed=4)
    assert first.manifest["files"] == again.manifest["files"], "every file identical (sha256)"
    np.testing.assert_array_equal(first.labels, again.labels)
    assert (np.asarray(first.labels) != np.asarray(other.labels)).sum() > 100


def _auroc(x: np.ndarray, labels: np.ndarray) -> float:
    half = len(labels) // 2
    return features_baseline((x[:half], labels[:half]), (x[half:], labels[half:]))["baseline_auroc"]


def test_a_features_only_model_is_capped_ever_lower_and_a_neighbour_aware_one_is_not(tmp_path):
    features_only, neighbour_aware = [], []
    for signal in (0.0, 0.5, 0.9):
        store = _store(tmp_path, signal)
        x, labels = np.asarray(store.features, np.float64), np.asarray(store.labels, np.int64)
        features_only.append(_auroc(x, labels))
        neighbour_aware.append(_auroc(np.concatenate([x, _neighbour_mean_features(store)], axis=1), labels))
    assert features_only[0] > 0.99 and features_only[0] > features_only[1] + 0.05 > features_only[2] + 0.1, features_only
    assert features_only[2] < 0.75, features_only
    assert min(neighbour_aware) > 0.98, neighbour_aware


def test_the_cli_builds_it_and_refuses_a_share_outside_0_1(tmp_path, capsys):
    assert main(["graph", "build", "synthetic", "--nodes", "500", "--edges", "3000", "--neighbour-signal", "0.8",
                 "--out", str(tmp_path / "g"), "--quiet"]) == 0
    assert GraphStore.open(tmp_path / "g").manifest["build"]["source"]["neighbour_signal"] == 0.8
    assert main(["graph", "build", "synthetic", "--neighbour-signal", "1.5", "--out", str(tmp_path / "h")]) == 2
    assert "--neighbour-signal must be in [0, 1], got 1.5" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()
