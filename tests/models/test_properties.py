"""Properties every model must have: padding changes nothing, node relabelling permutes node
outputs and leaves graph outputs alone, every parameter gets a gradient, bf16 autocast stays
finite, and activation checkpointing leaves gradients unchanged."""

import numpy as np
import pytest
import torch

from model_fixtures import TINY_EGT, TINY_ET, TINY_ET_SPARSE, TINY_GRAPHORMER, TINY_MNAGT, make_batch, permute_graph, random_graph
from gtscale.models import build_model

VARIANTS = {
    "egt": TINY_EGT,
    "egt-no-virtual-nodes": {**TINY_EGT, "num_virtual_nodes": 0},
    "egt-constrained": {**TINY_EGT, "constrained": True},
    "egt-simple": {**TINY_EGT, "simple": True, "output_edges": False},
    "egt-ungated": {**TINY_EGT, "gated": False, "scale_degree": False},
    "graphormer": TINY_GRAPHORMER,
    "et": TINY_ET,
    "et-self-loops-no-cls": {**TINY_ET, "self_loops": True, "cls_token": False},
    "et-sparse": TINY_ET_SPARSE,
    "et-sparse-self-loops": {**TINY_ET_SPARSE, "self_loops": True},
    "mnagt": TINY_MNAGT,
    "mnagt-rw-concat-virtual": {**TINY_MNAGT, "normalization": "rw", "aggregation": "concat", "readout": "virtual"},
    "mnagt-mean-sum": {**TINY_MNAGT, "aggregation": "mean", "readout": "sum", "num_kernels": 1},
}


def _model(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model({**VARIANTS[name], **overrides})


def _outputs(out):
    return [t for t in (out.node, out.edge, out.graph) if t is not None]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_padding_changes_nothing(name, graphs):
    model = _model(name).eval()
    with torch.no_grad():
        together = model(make_batch(graphs, pad_to=14))
        for k, g in enumerate(graphs):
            alone = model(make_batch([g]))
            n = g["node_feat"].shape[0]
            torch.testing.assert_close(together.node[k, :n], alone.node[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(together.graph[k], alone.graph[0], atol=1e-5, rtol=1e-5)
            if together.edge is not None:
                torch.testing.assert_close(together.edge[k, :n, :n], alone.edge[0], atol=1e-5, rtol=1e-5)
        assert together.node[:, 11:].abs().max() == 0, "padding rows must be zero"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_node_permutation_equivariance(name, graphs):
    model = _model(name).eval()
    batch = make_batch(graphs)
    k, n = 4, graphs[4]["node_feat"].shape[0]
    perm = torch.from_numpy(np.random.default_rng(1).permutation(n))
    with torch.no_grad():
        base, permuted = model(batch), model(permute_graph(batch, k, perm))
    torch.testing.assert_close(permuted.graph, base.graph, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(permuted.node[k, :n], base.node[k, perm], atol=1e-5, rtol=1e-5)
    if base.edge is not None:
        torch.testing.assert_close(permuted.edge[k, :n, :n], base.edge[k, perm][:, perm], atol=1e-5, rtol=1e-5)
    # a real relabelling test: the outputs of different nodes differ
    assert not torch.allclose(base.node[k, :n], base.node[k, perm])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_parameter_gets_a_gradient(name, graphs):
    model = _model(name).train()
    out = model(make_batch(graphs))
    gen = torch.Generator().manual_seed(0)
    # random projections: sums of layer-normed outputs have zero gradient by construction
    loss = sum((t * torch.randn(t.shape, generator=gen)).sum() for t in _outputs(out))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_bf16_autocast_is_finite(name, graphs):
    model = _model(name).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(make_batch(graphs, pad_to=16))
    for t in _outputs(out):
        assert torch.isfinite(t).all()


@pytest.mark.parametrize("name", ["egt", "egt-constrained", "graphormer", "et", "et-sparse", "mnagt"])
def test_bf16_backward_is_finite(name, graphs):
    """Padding queries of EGT-Constrained have every key masked: still no NaN, forward or back."""
    model = _model(name).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(make_batch(graphs, pad_to=16))
        loss = sum(t.float().square().mean() for t in _outputs(out))
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _dropouts(name: str) -> dict:
    if name.startswith("et"):
        return {"noise_std": 0.3}
    if name.startswith("mnagt"):
        return {"dropout": 0.1, "attention_dropout": 0.2}
    if name.startswith("egt"):
        return {"node_dropout": 0.1, "edge_dropout": 0.1, "attention_dropout": 0.2, "attn_maskout": 0.1}
    return {"dropout": 0.1, "attention_dropout": 0.2, "activation_dropout": 0.1}


@pytest.mark.parametrize("name", ["egt", "egt-simple", "graphormer", "et", "et-sparse", "mnagt"])
def test_checkpointing_gives_identical_gradients(name, graphs):
    """In training mode with every dropout on: the recomputation must replay the same masks."""
    batch = make_batch(graphs)
    grads = []
    for checkpointing in (False, True):
        model = _model(name, activation_checkpointing=checkpointing, **_dropouts(name)).train()
        torch.manual_seed(123)
        out = model(batch)
        gen = torch.Generator().manual_seed(0)
        sum((t * torch.randn(t.shape, generator=gen)).sum() for t in _outputs(out)).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    plain, checkpointed = grads
    assert plain.keys() == checkpointed.keys()
    for n in plain:
        torch.testing.assert_close(checkpointed[n], plain[n], atol=1e-6, rtol=1e-5, msg=n)


@pytest.mark.parametrize("name", ["egt", "graphormer", "et", "et-sparse", "mnagt"])
def test_dropouts_act_only_in_training(name, graphs):
    batch = make_batch(graphs)
    plain, noisy = _model(name).eval(), _model(name, **_dropouts(name)).eval()
    with torch.no_grad():
        torch.testing.assert_close(noisy(batch).graph, plain(batch).graph)
    noisy.train()
    with torch.no_grad():
        assert not torch.allclose(noisy(batch).graph, plain(batch).graph)


def test_single_node_and_disconnected_graphs_alone():
    rng = np.random.default_rng(5)
    for name in ("egt", "egt-constrained", "graphormer", "et", "et-sparse", "mnagt"):
        model = _model(name).eval()
        for g in (random_graph(rng, 1), random_graph(rng, 5, components=5)):
            with torch.no_grad():
                out = model(make_batch([g]))
            assert all(torch.isfinite(t).all() for t in _outputs(out))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_drops_at_rate_p_and_keeps_the_expectation(p):
    """keep_mask's 16-bit draws: the drop rate is p (to 2⁻¹⁷; measured over 2²² draws, within 5
    standard errors), the scale is the inverse keep rate used, and dropout keeps the mean."""
    from gtscale.models.layers import dropout, keep_mask

    torch.manual_seed(0)
    n = 1 << 22
    keep, scale = keep_mask((n,), p, torch.device("cpu"))
    assert keep.dtype == torch.bool and keep.shape == (n,)
    rate = 1 - keep.double().mean().item()
    assert abs(rate - p) < 5 * (p * (1 - p) / n) ** 0.5, rate
    assert scale == pytest.approx(1 / (1 - round(p * 65536) / 65536), rel=1e-12) and abs(1 / scale - (1 - p)) < 2**-17
    # each of the 16-bit halves of a random word draws alike (no half of the word is biased)
    assert abs((1 - keep[0::2].double().mean().item()) - (1 - keep[1::2].double().mean().item())) < 10 * (p * (1 - p) / n) ** 0.5
    x = torch.full((n,), 2.0)
    assert dropout(x, p, training=True).mean().item() == pytest.approx(2.0, abs=10 * 2 * (p / (1 - p) / n) ** 0.5)
    assert torch.equal(dropout(x, p, training=False), x)
    keep, scale = keep_mask((3, 5), 1.0, torch.device("cpu"))
    assert not keep.any() and scale == 0.0  # p = 1 drops everything, without dividing by zero
