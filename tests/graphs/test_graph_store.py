"""The on-disk CSR equals scipy.sparse's build of the same edges; stores open memory-mapped and
only when finished; every source lands in the same layout."""

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from graph_fixtures import random_edges, scipy_csr, write_plain

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.graphs.sources import mat_source, plain_source
from gtscale.graphs.store import MANIFEST, GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, np.uint64])
def test_csr_equals_scipy_build(tmp_path, dtype):
    n = 300
    edges = random_edges(n, 4000, seed=1, dtype=dtype)
    source = plain_source(write_plain(tmp_path / "plain", edges, n), edge_block=777)  # many blocks
    manifest = build_store(source, tmp_path / "store", progress=False)
    store = GraphStore.open(tmp_path / "store")
    ref = scipy_csr(edges.astype(np.int64), n)
    assert store.indptr.dtype == np.int64 and store.indices.dtype == np.int32
    np.testing.assert_array_equal(store.indptr, ref.indptr)
    np.testing.assert_array_equal(store.indices, ref.indices)
    loops = int((edges[:, 0] == edges[:, 1]).sum())
    assert manifest["self_loops_removed"] == loops
    assert manifest["num_edges"] == ref.nnz // 2
    assert manifest["duplicate_edges_removed"] == len(edges) - loops - ref.nnz // 2
    np.testing.assert_array_equal(store.features, np.load(tmp_path / "plain" / "features.npy"))
    np.testing.assert_array_equal(store.labels, np.load(tmp_path / "plain" / "labels.npy"))


def test_store_is_memory_mapped_and_verifies(tmp_path):
    build_store(synthetic_source(2000, 10000, seed=3), tmp_path / "s", feature_dtype="float16", progress=False)
    store = GraphStore.open(tmp_path / "s")
    assert isinstance(store.indices, np.memmap) and isinstance(store.features, np.memmap)
    assert store.features.dtype == np.float16 and store.labels.dtype == np.int8
    assert store.verify() == []
    with open(tmp_path / "s" / "labels.npy", "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x07")
    assert store.verify() == ["labels.npy"]


def test_opening_a_store_leaves_torchs_thread_count_alone(tmp_path):
    """A parallel numba check at open once set the process's OpenMP thread count to every core,
    which torch shares: `OMP_NUM_THREADS=1 gtscale train` then trained on two threads."""
    import os
    import subprocess
    import sys

    build_store(synthetic_source(500, 2000, seed=3), tmp_path / "s", progress=False)
    code = f"import torch; from gtscale.graphs.store import GraphStore; GraphStore.open({str(tmp_path / 's')!r}); print(torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=os.environ | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "1", out.stderr


def test_a_store_without_manifest_does_not_open_and_is_not_replaced(tmp_path):
    """Without graph.json nothing says gtscale wrote the folder: it is refused, not deleted."""
    build_store(synthetic_source(500, 2000, seed=0), tmp_path / "s", progress=False)
    (tmp_path / "s" / MANIFEST).unlink()
    with pytest.raises(UserError, match="not a finished graph store"):
        GraphStore.open(tmp_path / "s")
    with pytest.raises(UserError, match="holds files gtscale did not write"):
        build_store(synthetic_source(500, 2000, seed=0), tmp_path / "s", progress=False)
    assert (tmp_path / "s" / "indptr.npy").is_file()


def test_rebuild_interrupted_while_replacing_the_store_completes(tmp_path):
    """A rebuild first renames the old store aside: a crash then leaves no `s` (and `.s.old`), never
    a store without its graph.json; the next build puts one in place and removes what was set aside."""
    build_store(synthetic_source(500, 2000, seed=0), tmp_path / "s", progress=False)
    (tmp_path / "s").rename(tmp_path / ".s.old")  # as after a crash between the two renames
    build_store(synthetic_source(500, 2000, seed=1), tmp_path / "s", progress=False)
    assert GraphStore.open(tmp_path / "s").num_nodes == 500
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_synthetic_is_seeded_power_law_with_planted_anomalies(tmp_path):
    a = synthetic_source(20000, 200000, seed=5, block=50000)
    b = synthetic_source(20000, 200000, seed=5, block=50000)
    for (_, s1, d1, _), (_, s2, d2, _) in zip(a.edge_blocks(), b.edge_blocks()):
        np.testing.assert_array_equal(s1, s2), np.testing.assert_array_equal(d1, d2)
    build_store(a, tmp_path / "s", progress=False)
    store = GraphStore.open(tmp_path / "s")
    degree = np.diff(store.indptr)
    assert degree.max() > 20 * np.median(degree)  # heavy tail
    anomalous = store.labels == 1
    assert 0.02 < anomalous.mean() < 0.04
    share = np.array([anomalous[store.neighbours(u)].mean() if degree[u] else 0 for u in range(store.num_nodes)])
    assert share[anomalous].mean() > 3 * share[~anomalous].mean()  # neighbourhoods differ
    assert store.features[anomalous, :3].mean() > store.features[~anomalous, :3].mean() + 0.3


def _write_mat(path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    rels = {name: sp.random(n, n, density=0.05, random_state=i, format="csc") for i, name in enumerate(["net_rur", "net_rtr", "net_rsr"])}
    rels = {k: ((v + v.T) > 0).astype(np.float64) for k, v in rels.items()}
    homo = sum(rels.values())
    features = sp.random(n, 7, density=0.5, random_state=9, format="csc")
    label = (rng.random((1, n)) < 0.15).astype(np.int64)
    scipy.io.savemat(path, {**rels, "homo": homo, "features": features, "label": label})
    return rels, features, label


def test_mat_union_and_typed_relations(tmp_path):
    rels, features, label = _write_mat(tmp_path / "YelpChi.mat")
    build_store(mat_source(tmp_path / "YelpChi.mat", "union"), tmp_path / "u", progress=False)
    union = GraphStore.open(tmp_path / "u")
    all_edges = np.concatenate([np.stack(sp.find(m)[:2], 1) for m in rels.values()])
    ref = scipy_csr(all_edges, 60)
    np.testing.assert_array_equal(union.indices, ref.indices)
    np.testing.assert_allclose(union.features, features.toarray())
    np.testing.assert_array_equal(union.labels, label[0])
    build_store(mat_source(tmp_path / "YelpChi.mat", "typed"), tmp_path / "t", progress=False)
    typed = GraphStore.open(tmp_path / "t")
    np.testing.assert_array_equal(typed.indices, union.indices)
    order = sorted(rels)
    assert typed.manifest["relations"] == order
    rows = np.repeat(np.arange(60), np.diff(typed.indptr))
    for bit, name in enumerate(order):
        has = (typed.relations >> bit) & 1 == 1
        in_rel = np.asarray(rels[name].tocsr()[rows, typed.indices]).ravel() > 0
        np.testing.assert_array_equal(has, in_rel, err_msg=name)


def test_plain_splits_and_cli_info(tmp_path, capsys):
    n = 50
    splits = {"train": np.arange(0, 20), "val": np.arange(20, 30), "test": np.zeros(n, bool)}
    write_plain(tmp_path / "p", random_edges(n, 200, seed=2), n, splits=splits)
    assert main(["graph", "build", "plain", "--input", str(tmp_path / "p"), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    store = GraphStore.open(tmp_path / "s")
    np.testing.assert_array_equal(np.flatnonzero(store.masks["train"][:, 0]), np.arange(20))
    assert store.masks["test"].shape == (n, 1) and not store.masks["test"].any()
    assert main(["graph", "info", str(tmp_path / "s"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "nodes 50" in out and "verified" in out
    assert json.loads((tmp_path / "s" / MANIFEST).read_text())["masks"] == {"test": 1, "train": 1, "val": 1}
