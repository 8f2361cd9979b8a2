"""Full-neighbourhood inference (train/full_inference.py with the sparse ET's layer-wise form): the
scores of every node equal one forward of the model over the whole graph, whatever the chunking,
steps and self-loops; its node states live in a folder of their own under the work folder, gone
afterwards; a model without a layer-wise form is refused in one line."""

import numpy as np
import pytest
import torch

from gtscale.graphs.store import GraphStore, build_store
from gtscale.graphs.synthetic import synthetic_source
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models import load_model_config
from gtscale.models.export import build_exported
from gtscale.train.full_inference import full_graph_logits, row_chunks


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """700 nodes of power-law degree (isolated nodes and hubs among them)."""
    path = tmp_path_factory.mktemp("full") / "store"
    build_store(synthetic_source(700, 2500, seed=9, neighbour_signal=0.5), path, progress=False)
    return GraphStore.open(path)


def _model(steps: int, self_loops: bool, seed: int = 0):
    torch.manual_seed(seed)
    cfg = load_model_config("et-tfinance") | {"node_width": 24, "head_dim": 8, "num_heads": 3, "num_memories": 32, "num_steps": steps,
                                              "step_size": 0.5, "self_loops": self_loops, "node_float_dim": 10,
                                              "head": {"kind": "node", "num_outputs": 1, "hidden": [16]}}
    model = build_exported(cfg).eval()
    with torch.no_grad():  # larger attention logits than at initialisation, so that the softmax matters
        model.backbone.block.wq.mul_(3.0)
    return model


def _whole_graph(model, store: GraphStore) -> np.ndarray:
    n = store.num_nodes
    rows = np.repeat(np.arange(n), np.diff(np.asarray(store.indptr)))
    batch = EdgeBatch(edge_index=torch.from_numpy(np.stack([np.asarray(store.indices, np.int64), rows])),
                      graph_index=torch.zeros(n, dtype=torch.long), num_graphs=1,
                      node_feat_float=torch.from_numpy(np.array(store.features, np.float32)))
    with torch.no_grad():
        return model(batch)[:, 0].numpy()


@pytest.mark.parametrize("steps,self_loops,chunk_edges", [(1, True, 50), (2, True, 7), (3, False, 300), (2, True, 10_000)])
def test_scores_equal_one_forward_over_the_whole_graph(store, tmp_path, steps, self_loops, chunk_edges):
    model = _model(steps, self_loops)
    expected = _whole_graph(model, store)
    got = full_graph_logits(model, store, tmp_path / "work", chunk_edges=chunk_edges, progress=False)
    assert got.shape == (store.num_nodes,) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert expected.std() > 0.01, "the scores vary from node to node"
    assert list((tmp_path / "work").iterdir()) == [], "the node states are removed"


def test_row_chunks_cover_every_row_once_within_the_budget():
    indptr = np.cumsum([0, 3, 0, 0, 12, 1, 1, 1, 0, 2])
    chunks = row_chunks(indptr, 4)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(indptr) - 1 and all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))
    assert all(a < b for a, b in chunks)
    for a, b in chunks:
        assert indptr[b] - indptr[a] <= 4 or b - a == 1, "more entries only for a row of its own"
        assert b - a <= 4


def test_a_model_without_a_layerwise_form_is_refused(store, tmp_path):
    from gtscale.errors import UserError

    cfg = load_model_config("mnagt-small") | {"node_vocab": [], "node_float_dim": 10, "head": {"kind": "node", "num_outputs": 1}}
    with pytest.raises(UserError, match="MNAGT does not: score it by sampling"):
        full_graph_logits(build_exported(cfg), store, tmp_path, progress=False)
