"""The native DGL reader equals real DGL's load of files that real DGL 1.1.3 wrote.

The fixtures and their expected arrays come from tests/graphs/make_dgl_fixtures.py (run with DGL in
a throwaway environment; DGL is not a gtscale dependency)."""

from pathlib import Path

import numpy as np
import pytest

from gtscale.graphs.dgl_file import read_dgl_graph
from gtscale.graphs.sources import dgl_source

FIXTURES = Path(__file__).parent / "fixtures"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.bin"))


def test_fixtures_cover_every_stored_format_and_label_kind():
    kinds = {read_dgl_graph(FIXTURES / f"{name}.bin").adjacency.kind for name in NAMES}
    assert kinds == {"coo", "csr", "csc"}
    labels = {read_dgl_graph(FIXTURES / f"{name}.bin").ndata["label"].dtype.kind + str(read_dgl_graph(FIXTURES / f"{name}.bin").ndata["label"].ndim) for name in NAMES}
    assert {"i1", "f2", "f1"} <= labels  # int [N], one-hot float [N, 2], float [N]


@pytest.mark.parametrize("name", NAMES)
def test_reader_equals_dgl_load(name):
    graph = read_dgl_graph(FIXTURES / f"{name}.bin")
    expected = np.load(FIXTURES / f"{name}.expected.npz")
    assert graph.num_nodes == int(expected["num_nodes"])
    src, dst = graph.edges_by_id()
    np.testing.assert_array_equal(src, expected["src"])
    np.testing.assert_array_equal(dst, expected["dst"])
    ndata_keys = sorted(k.removeprefix("ndata_") for k in expected.files if k.startswith("ndata_"))
    assert sorted(graph.ndata) == ndata_keys
    for key in ndata_keys:
        assert graph.ndata[key].dtype == expected[f"ndata_{key}"].dtype, key
        np.testing.assert_array_equal(graph.ndata[key], expected[f"ndata_{key}"], err_msg=key)


def test_csr_and_csc_fixtures_carry_edge_ids():
    """Non-trivial `data` arrays: the edge-id order differs from the stored order."""
    graph = read_dgl_graph(FIXTURES / "csr_tfinance_like.bin")
    assert len(graph.adjacency.data) == graph.num_edges
    assert not np.array_equal(graph.adjacency.data, np.arange(graph.num_edges))


def test_arrays_are_memory_mapped_views():
    graph = read_dgl_graph(FIXTURES / "coo_tsocial_like.bin")
    assert not graph.ndata["feature"].flags.owndata and not graph.ndata["feature"].flags.writeable


def test_gadbench_node_data_becomes_labels_and_masks():
    source = dgl_source(FIXTURES / "csr_tfinance_like.bin")
    one_hot = read_dgl_graph(FIXTURES / "csr_tfinance_like.bin").ndata["label"]
    np.testing.assert_array_equal(source.labels, one_hot.argmax(axis=1))
    assert source.labels.dtype == np.int8
    masks = read_dgl_graph(FIXTURES / "csr_tfinance_like.bin").ndata["train_masks"]
    assert source.masks["train"].shape == (33, 20) and source.masks["train"].dtype == bool
    np.testing.assert_array_equal(source.masks["train"], masks == 1)
