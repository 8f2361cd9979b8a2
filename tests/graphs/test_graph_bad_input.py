"""Bad graph input: one line naming the file and the first bad row or byte, exit 2, and nothing left
that looks like a finished store (an existing store stays as it was)."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from graph_fixtures import random_edges, write_plain

from gtscale.cli import main
from gtscale.graphs.store import MANIFEST, GraphStore

FIXTURES = Path(__file__).parent / "fixtures"
N = 40


def _plain(tmp: Path, edit) -> tuple[str, Path]:
    folder = write_plain(tmp / "plain", random_edges(N, 150, seed=4), N)
    edit(folder)
    return "plain", folder


def _set(name: str, index, value, dtype=None):
    def edit(folder: Path):
        array = np.load(folder / name)
        array = array.astype(dtype) if dtype else array
        array[index] = value
        np.save(folder / name, array)

    return edit


def _dgl(tmp: Path, edit) -> tuple[str, Path]:
    path = tmp / "graph.bin"
    data = bytearray((FIXTURES / "coo_tsocial_like.bin").read_bytes())
    path.write_bytes(edit(data))
    return "dgl", path


def _dgl_version(data):
    data[8:16] = (3).to_bytes(8, "little")
    return bytes(data)


CASES = {
    # case: (make input, file named, fragment naming the first bad row / byte)
    "edge outside the node range": (lambda t: _plain(t, _set("edges.npy", (17, 1), N + 5)), "edges.npy", f"edge row 17: node id {N + 5} is outside 0..{N - 1}"),
    "uint64 id beyond int64": (lambda t: _plain(t, _set("edges.npy", (17, 1), 2**63 + 5, np.uint64)), "edges.npy",
                               f"edge row 17: node id {2**63 + 5} is outside 0..{N - 1}"),  # once reported as negative
    "negative node id": (lambda t: _plain(t, _set("edges.npy", (23, 0), -3)), "edges.npy", "edge row 23: node id -3 is negative"),
    "NaN feature": (lambda t: _plain(t, _set("features.npy", (11, 2), np.nan)), "features.npy", "feature row 11 holds NaN or inf"),
    "inf feature": (lambda t: _plain(t, _set("features.npy", (30, 0), np.inf)), "features.npy", "feature row 30 holds NaN or inf"),
    "label outside {0, 1, -1}": (lambda t: _plain(t, _set("labels.npy", 9, 2)), "labels.npy", "label row 9 is 2"),
    "feature/label length mismatch": (lambda t: _plain(t, lambda f: np.save(f / "labels.npy", np.zeros(N - 1, np.int64))), "labels.npy", f"{N - 1} labels for {N} feature rows"),
    "pickled array": (lambda t: _plain(t, lambda f: np.save(f / "labels.npy", np.array([{}] * N, dtype=object), allow_pickle=True)), "labels.npy", "not a plain numpy array"),
    "DGL file of another version": (lambda t: _dgl(t, _dgl_version), "graph.bin", "byte 8: DGL graph file format version 3"),
    "truncated DGL file": (lambda t: _dgl(t, lambda d: bytes(d[:6000])), "graph.bin", "truncated file"),
    "not a DGL file": (lambda t: _dgl(t, lambda d: b"\x00" * 64), "graph.bin", "byte 0: not a DGL graph file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("existing_store", [False, True])
def test_bad_input_is_one_line_exit_2_and_nothing_complete(tmp_path, capsys, case, existing_store):
    make, file_name, fragment = CASES[case]
    out = tmp_path / "store"
    if existing_store:
        good = write_plain(tmp_path / "good", random_edges(N, 100, seed=1), N)
        assert main(["graph", "build", "plain", "--input", str(good), "--out", str(out), "--quiet"]) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        capsys.readouterr()
    kind, path = make(tmp_path)
    assert main(["graph", "build", kind, "--input", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert file_name in err and fragment in err, err
    assert not (tmp_path / ".store.building").exists()
    if existing_store:  # the finished store is untouched
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        GraphStore.open(out)
    else:
        assert not (out / MANIFEST).exists()


def test_truncated_dgl_names_the_byte_offset(tmp_path, capsys):
    _, path = _dgl(tmp_path, lambda d: bytes(d[:6000]))
    assert main(["graph", "build", "dgl", "--input", str(path), "--out", str(tmp_path / "s"), "--quiet"]) == 2
    err = capsys.readouterr().err
    at = int(err.split("byte ")[1].split(":")[0])
    assert 4096 < at <= 6000 and "the file ends at byte 6000" in err


def test_refuses_to_replace_a_folder_that_is_not_a_store(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    good = write_plain(tmp_path / "good", random_edges(N, 100, seed=1), N)
    assert main(["graph", "build", "plain", "--input", str(good), "--out", str(tmp_path / "mine"), "--quiet"]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    shutil.rmtree(tmp_path / "mine")


# --- corrupt stores: every command that samples one refuses it in one line, never segfaults ----------
def _corrupt(file: str, change):
    """Edit one array of a built store in place, keeping its size (so only the CSR check finds it)."""
    def edit(store: Path):
        array = np.load(store / file)
        change(array, np.load(store / "indptr.npy"))
        np.save(store / file, array)
    return edit


def _set_at(i: int, value):
    def change(array, indptr):
        array[i] = value
    return change


def _repeat_a_neighbour(indices, indptr):
    row = int(np.argmax(np.diff(indptr) >= 2))
    indices[indptr[row] + 1] = indices[indptr[row]]


CORRUPT_STORES = {
    # case: (edit, file named, fragment)
    "index past the last node": (_corrupt("indices.npy", _set_at(5, 10**9)), "indices.npy", "node id 1000000000 outside 0..39"),
    "negative index": (_corrupt("indices.npy", _set_at(3, -7)), "indices.npy", "node id -7 outside 0..39"),
    "repeated neighbour": (_corrupt("indices.npy", _repeat_a_neighbour), "indices.npy", "not strictly increasing"),
    "row pointer past the end": (_corrupt("indptr.npy", _set_at(10, 10**6)), "indptr.npy", "decreases at entry 11"),
    "first row pointer not 0": (_corrupt("indptr.npy", _set_at(0, 1)), "indptr.npy", "entry 0 is 1"),
    "last row pointer short": (_corrupt("indptr.npy", _set_at(-1, 3)), "indptr.npy", "last entry is 3"),
}


@pytest.fixture(scope="module")
def built_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corrupt")
    plain = write_plain(root / "plain", random_edges(N, 150, seed=4), N)
    assert main(["graph", "build", "plain", "--input", str(plain), "--out", str(root / "store"), "--quiet"]) == 0
    return root / "store"


def _ego_argv(store: Path, out: Path) -> list[str]:
    return ["shard", "graph-ego", "--graph", str(store), "--out", str(out), "--no-progress", "--max-nodes", "16", "--fanouts", "8,8",
            "--svd-rank", "0"]


@pytest.mark.parametrize("case", sorted(CORRUPT_STORES))
def test_corrupt_store_is_refused_at_open_before_any_kernel_runs(built_store, tmp_path, capsys, case):
    edit, file_name, fragment = CORRUPT_STORES[case]
    store = Path(shutil.copytree(built_store, tmp_path / "store"))
    edit(store)
    assert main(_ego_argv(store, tmp_path / "ego")) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{store / file_name}:" in lines[0] and fragment in lines[0], lines
    assert not (tmp_path / "ego").exists()


def test_an_out_of_range_index_is_exit_2_not_a_segfault(built_store, tmp_path):
    """In a child process: the old code's kernels read past the arrays and died with SIGSEGV (139),
    leaving plan.json and a .tar.tmp behind."""
    import subprocess
    import sys

    store = Path(shutil.copytree(built_store, tmp_path / "store"))
    CORRUPT_STORES["index past the last node"][0](store)
    result = subprocess.run([sys.executable, "-m", "gtscale.cli", *_ego_argv(store, tmp_path / "ego")], capture_output=True, text=True)
    assert result.returncode == 2 and "indices.npy: row" in result.stderr, (result.returncode, result.stderr)
    assert not (tmp_path / "ego").exists()


def test_samplers_refuse_arrays_that_did_not_pass_the_check(built_store):
    """The kernels' gate: arrays handed to the samplers directly (not through GraphStore.open) are
    checked too. A repeated neighbour does not crash the old code; it silently miscounts."""
    from gtscale.errors import UserError
    from gtscale.graphs.sample import EgoSampler, induced_subgraph

    store = GraphStore.open(built_store)
    indptr, indices = np.array(store.indptr), np.array(store.indices)
    _repeat_a_neighbour(indices, indptr)
    with pytest.raises(UserError, match="not strictly increasing"):
        EgoSampler(indptr, indices, (4,), 8)
    with pytest.raises(UserError, match="not strictly increasing"):
        induced_subgraph(indptr, indices, 0.5, 0)
    EgoSampler(store.indptr, store.indices, (4,), 8).sample([0, 1])  # the store's own arrays pass


def test_the_check_runs_once_per_process_for_unchanged_files(built_store, monkeypatch):
    from gtscale.graphs import store as store_module

    GraphStore.open(built_store)
    calls = []
    monkeypatch.setattr(store_module, "check_csr", lambda *a, **k: calls.append(a))
    GraphStore.open(built_store)
    assert calls == []


@pytest.mark.parametrize("case", sorted(CORRUPT_STORES))
def test_graph_info_runs_the_open_checks(built_store, tmp_path, capsys, case):
    """Plain `graph info` once printed the summary of a corrupt store and exited 0."""
    edit, file_name, fragment = CORRUPT_STORES[case]
    store = Path(shutil.copytree(built_store, tmp_path / "store"))
    edit(store)
    assert main(["graph", "info", str(store)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{store / file_name}:" in lines[0] and fragment in lines[0], lines


def test_graph_info_says_what_it_did_not_check(built_store, tmp_path, capsys):
    """A changed byte in features.npy keeps every size and shape: only --verify's checksums see it,
    and plain `graph info` says it has not read them."""
    store = Path(shutil.copytree(built_store, tmp_path / "store"))
    data = bytearray((store / "features.npy").read_bytes())
    data[-1] ^= 0x40
    (store / "features.npy").write_bytes(bytes(data))
    assert main(["graph", "info", str(store)]) == 0
    assert "checksums not verified: --verify reads every file" in capsys.readouterr().out
    assert main(["graph", "info", str(store), "--verify"]) == 2
    assert "checksum mismatch in features.npy" in capsys.readouterr().err
