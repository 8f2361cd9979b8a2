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
    widths = [(layer.in_features, layer.out_features) for layer in head.mlp.layers]
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


@pytest.mark.parametrize("cfg", [TINY_EGT, TINY_GRAPHORMER])
@pytest.mark.parametrize("kind", ["graph", "node", "edge"])
def test_a_head_with_graph_features_and_a_silent_backbone_is_an_mlp_on_the_features(graphs, cfg, kind):
    """The backbone's part of the head's first layer zeroed (a backbone contributing nothing): the
    model's scores are an MLP of the molecule-level features alone, for every graph (and every
    node / pair row of it)."""
    from dataclasses import replace

    from gtscale.models.heads import MLP

    if kind == "edge" and cfg is TINY_GRAPHORMER:
        pytest.skip("Graphormer has no edge outputs")
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    head = build_head({"kind": kind, "num_outputs": 2, "hidden": [8], "graph_features": 5}, model)
    first = head.mlp.layers[0]
    width = first.in_features - 5
    with torch.no_grad():
        first.weight[:, :width] = 0.0
    features = torch.randn(len(graphs), 5)
    batch = replace(make_batch(graphs), graph_feat=features)
    alone = MLP([5, 8, 2], "elu")
    with torch.no_grad():
        alone.layers[0].weight.copy_(first.weight[:, width:])
        alone.layers[0].bias.copy_(first.bias)
        alone.layers[1].load_state_dict(head.mlp.layers[1].state_dict())
        scores, expected = head(model(batch), batch.graph_feat), alone(features)
    rows = expected.reshape(len(graphs), *([1] * (scores.dim() - 2)), 2).expand_as(scores)
    torch.testing.assert_close(scores, rows)
    with pytest.raises(ValueError, match="graph_feat of width 5, the batch has none"):
        head(model(batch))


def test_graph_features_change_the_prediction(graphs):
    torch.manual_seed(0)
    model = build_model(TINY_EGT).eval()
    head = build_head({"kind": "graph", "graph_features": 3}, model)
    outputs = model(make_batch(graphs))
    a, b = head(outputs, torch.zeros(len(graphs), 3)), head(outputs, torch.ones(len(graphs), 3))
    assert not torch.allclose(a, b)


def test_head_dropout_drops_the_inputs_of_every_layer_in_training_only(graphs):
    _, head, batch = _run(TINY_EGT, {"kind": "graph", "hidden": [64], "dropout": 0.5}, graphs)
    x = torch.randn(4096, head.mlp.layers[0].in_features)
    first, second = head.mlp.layers
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda module, args: seen.append(args[0])) for layer in (first, second)]
    head.train()
    head.mlp(x)
    for hook in hooks:
        hook.remove()
    dropped_in, dropped_hidden = seen
    # the first layer's input: half the elements zeroed, the rest doubled (inverted dropout)
    zero = dropped_in == 0
    assert 0.45 < zero.float().mean() < 0.55
    torch.testing.assert_close(dropped_in[~zero], 2 * x[~zero])
    assert 0.45 < (dropped_hidden == 0).float().mean() < 0.55  # and the hidden layer's input
    head.eval()
    plain = build_head({"kind": "graph", "hidden": [64]}, build_model(TINY_EGT))
    plain.load_state_dict(head.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(head.mlp(x), plain.eval().mlp(x))  # evaluation sees no dropout


@pytest.mark.parametrize("bad, match", [({"dropout": 1.0}, r"head.dropout: must be in \[0, 1\), got 1.0"), ({"form": "graphormer", "dropout": 0.1}, "mlp form")])
def test_head_dropout_is_checked(bad, match):
    with pytest.raises(UserError, match=match):
        build_head({"kind": "graph", **bad}, build_model(TINY_EGT))


def test_feature_dropout_thins_the_molecule_features_alone(graphs):
    """feature_dropout: its own rate on graph_feat's block of the first layer's input; the graph
    representation beside it keeps `dropout` (here none), and evaluation sees no dropout at all."""
    torch.manual_seed(0)
    model = build_model(TINY_EGT).eval()
    head = build_head({"kind": "graph", "hidden": [8], "graph_features": 4096, "dropout": 0.0, "feature_dropout": 0.75}, model)
    outputs = model(make_batch(graphs))
    feat = torch.rand(len(graphs), 4096) + 0.5
    seen = []
    hook = head.mlp.layers[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    head.train()
    head(outputs, feat)
    head.eval()
    head(outputs, feat)
    hook.remove()
    trained, evaluated = seen
    width = outputs.graph.shape[-1]
    torch.testing.assert_close(trained[:, :width], outputs.graph)  # the representation: untouched
    dropped = trained[:, width:]
    zero = dropped == 0
    assert 0.72 < zero.float().mean() < 0.78
    torch.testing.assert_close(dropped[~zero], 4 * feat[~zero])  # inverted dropout: 1 / (1 - 0.75)
    torch.testing.assert_close(evaluated, torch.cat([outputs.graph, feat], dim=-1))


def test_without_feature_dropout_the_head_drops_its_whole_input_at_one_rate(graphs):
    torch.manual_seed(0)
    model = build_model(TINY_EGT).eval()
    head = build_head({"kind": "graph", "hidden": [8], "graph_features": 4096, "dropout": 0.5}, model).train()
    outputs = model(make_batch(graphs))
    seen = []
    head.mlp.layers[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    head(outputs, torch.rand(len(graphs), 4096) + 0.5)
    assert 0.45 < (seen[0][:, 4096 // 2:] == 0).float().mean() < 0.55
