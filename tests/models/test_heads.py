"""Heads: sized from the model, reading the right output, and EGT's distance objective."""

import pytest
import torch

from model_fixtures import TINY_EGT, TINY_GRAPHORMER, make_batch
from gtscale.errors import UserError
from gtscale.models import build_head, build_model


def _run(cfg, head_cfg, graphs):
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    head = build_head(head_cfg, model)
    batch = make_batch(graphs)
    with torch.no_grad():
        return head(model(batch)), head, batch


@pytest.mark.parametrize("kind, shape", [("graph", (5, 3)), ("node", (5, 11, 3)), ("edge", (5, 11, 11, 3))])
def test_head_shapes(graphs, kind, shape):
    scores, _, _ = _run(TINY_EGT, {"kind": kind, "num_outputs": 3, "hidden": [8]}, graphs)
    assert scores.shape == shape


def test_graph_head_is_the_authors_mlp():
    model = build_model(TINY_EGT)
    head = build_head({"kind": "graph", "hidden": [16, 16]}, model)
    widths = [(l.in_features, l.out_features) for l in head.mlp.layers]
    assert widths == [(TINY_EGT["node_width"] * TINY_EGT["num_virtual_nodes"], 16), (16, 16), (16, 1)]


def test_edge_heads_need_edge_outputs():
    for cfg in ({**TINY_EGT, "output_edges": False}, TINY_GRAPHORMER):
        with pytest.raises(UserError, match="edge outputs"):
            build_head({"kind": "distance"}, build_model(cfg))


def test_head_config_errors_name_the_key():
    with pytest.raises(UserError, match="head.hiden"):
        build_head({"kind": "graph", "hiden": [3]}, build_model(TINY_EGT))


def test_distance_objective(graphs):
    nu = 2
    scores, head, batch = _run(TINY_EGT, {"kind": "distance", "max_hops": nu, "weight": 0.5}, graphs)
    assert scores.shape[-1] == nu + 1
    loss = head.distance_loss(scores, batch)
    real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
    scored = real & (batch.spd <= nu)
    expected = 0.5 * torch.nn.functional.cross_entropy(scores[scored], batch.spd[scored])
    torch.testing.assert_close(loss, expected)
    # scores of unscored pairs (farther than ν, unreachable, padding) do not matter
    shuffled = scores.clone()
    shuffled[~scored] = torch.randn_like(shuffled[~scored]) * 10
    torch.testing.assert_close(head.distance_loss(shuffled, batch), loss)
