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
