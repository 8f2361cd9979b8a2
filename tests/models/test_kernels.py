"""models/kernels: each fast kernel computes its reference's function (fp32, forward and backward,
dropout masks drawn by the caller, with padding), and the one switch decides which runs."""

import os
import subprocess
import sys

import pytest
import torch

from model_fixtures import TINY_EGT, TINY_GRAPHORMER, make_batch
from gtscale.errors import UserError
from gtscale.models import build_model, kernels
from gtscale.models.egt import gated_attention
from gtscale.models.embeddings import MASK_VALUE
from gtscale.models.graphormer import biased_attention
from gtscale.models.kernels import gated_attention as fused
from gtscale.models.kernels import linear as onednn
from gtscale.models.kernels import sdpa
from gtscale.models.layers import keep_mask


def _grads(fn, *inputs):
    """fn's output and the gradients of `inputs` under a fixed non-uniform incoming gradient."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
    return [out.detach()] + [t.grad for t in leaves]


def _egt_masks():
    """(logit_mask, gate_mask) [1, 2, 6, 6] of 2 graphs × 6 tokens: graph 1 has two padding tokens
    (keys masked, and their own query rows fully masked), graph 0 a pair masked as a constrained
    model masks it."""
    allowed = torch.ones(1, 2, 6, 6, dtype=torch.bool)
    allowed[:, 1, :, 4:] = False
    allowed[:, 1, 4:, :] = False
    allowed[:, 0, 2, 5] = False
    return torch.zeros(allowed.shape).masked_fill(~allowed, MASK_VALUE), allowed.float()


@pytest.mark.parametrize("wrapper", ["opaque", "traced"])
@pytest.mark.parametrize("num_virtual", [-1, 0, 2])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_gated_attention_kernel_equals_the_reference(wrapper, num_virtual, p):
    """EGT eq. 4 and 8-9: the hand-written backward in both wrappers (the custom ops a CPU runs,
    the autograd.Function a GPU traces) against autograd on egt.gated_attention."""
    torch.manual_seed(0)
    shape = (3, 2, 6, 6)  # heads, graphs, tokens, tokens
    h_hat, gate_logits, v = torch.randn(shape), torch.randn(shape), torch.randn(3, 2, 6, 4)
    logit_mask, gate_mask = _egt_masks()
    keep, scale = keep_mask(shape, p, h_hat.device) if p else (None, 1.0)
    kernel = (lambda *a: fused._opaque_forward(*a)[0]) if wrapper == "opaque" else fused._Traced.apply

    got = _grads(lambda h, g, vv: kernel(h, g, vv, logit_mask, gate_mask, keep, scale, num_virtual), h_hat, gate_logits, v)
    want = _grads(lambda h, g, vv: gated_attention(h, g, vv, logit_mask, gate_mask, keep, scale, num_virtual), h_hat, gate_logits, v)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert got[0][:, 1, 4:].abs().max() == 0  # padding queries attend to nothing
    if num_virtual > 0:  # the virtual nodes' rows are unscaled: A V
        plain = gated_attention(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, -1)
        torch.testing.assert_close(got[0][:, :, :num_virtual], plain[:, :, :num_virtual])


def test_gated_attention_custom_ops_pass_torch_library_checks():
    """torch.library.opcheck on the opaque forward: schema, fake (meta) shapes, autograd
    registration and no aliasing between outputs, as torch.compile relies on them."""
    torch.manual_seed(0)
    shape = (2, 3, 6, 6)
    mask = torch.zeros(1, 3, 1, 6)
    for keep, scale, num_virtual in [(None, 1.0, -1), (*keep_mask(shape, 0.2, torch.device("cpu")), 2)]:
        args = (torch.randn(shape, requires_grad=True), torch.randn(shape, requires_grad=True),
                torch.randn(2, 3, 6, 4, requires_grad=True), mask, torch.ones(1, 3, 1, 6), keep, scale, num_virtual)
        torch.library.opcheck(fused._opaque_forward, args)


def test_sdpa_equals_the_reference():
    """Graphormer eq. 6 without dropout: torch's fused SDPA against graphormer.biased_attention,
    with padding keys masked as Graphormer masks them (padding queries attend to the real keys).
    SDPA draws its own dropout masks, so with dropout the two agree only in distribution; on a CPU
    the model runs the reference then (the model test below)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    bias = torch.randn(2, 3, 6, 6)
    bias[1, :, :, 4:] = MASK_VALUE
    got = _grads(lambda *t: sdpa.attention(*t, bias, 0.0), q, k, v)
    want = _grads(lambda *t: biased_attention(*t, bias, None, 1.0), q, k, v)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert sdpa.applies(q, 0.0) and not sdpa.applies(q, 0.1)


def test_dropout_mask_kernel_draws_the_reference_masks():
    shape = (5, 7, 9)  # an odd count: the last random word is half used
    masks = []
    for spec in ("fast", "reference"):
        with kernels.using(spec):
            torch.manual_seed(3)
            masks.append(keep_mask(shape, 0.3, torch.device("cpu")))
    assert masks[0][1] == masks[1][1] and torch.equal(masks[0][0], masks[1][0])


MODELS = {
    "egt": {**TINY_EGT, "attention_dropout": 0.3, "node_dropout": 0.1},
    "egt-maskout": {**TINY_EGT, "attn_maskout": 0.2, "num_virtual_nodes": 0},
    "graphormer": {**TINY_GRAPHORMER, "attention_dropout": 0.0},
    "graphormer-dropout": {**TINY_GRAPHORMER, "attention_dropout": 0.3},
}


@pytest.fixture
def every_product_in_onednn(monkeypatch):
    """The tiny models' products are far below ONEDNN_MIN_FLOPS: without this, linear's kernel
    would not run."""
    monkeypatch.setattr(onednn, "ONEDNN_MIN_FLOPS", 0)


def _train_step(cfg: dict, batch, spec: str):
    torch.manual_seed(0)
    model = build_model(cfg).train()
    with kernels.using(spec):
        torch.manual_seed(1)  # the same dropout draws on both paths
        out = model(batch)
        (out.graph ** 2).sum().backward()
    return [out.node.detach(), out.graph.detach()] + [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_with_fast_kernels_equals_the_reference(name, graphs, every_product_in_onednn):
    """A whole training step (padded batch, dropout on) with every kernel, and with none: the same
    outputs and parameter gradients."""
    batch = make_batch(graphs, pad_to=13)
    fast, reference = _train_step(MODELS[name], batch, "fast"), _train_step(MODELS[name], batch, "reference")
    assert len(fast) == len(reference)
    for a, b in zip(fast, reference):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_training_step_counts_the_same_flops_with_or_without_kernels(graphs):
    """FLOP counts (and MFU) do not depend on the kernels: the opaque attention ops count the
    products the reference makes."""
    from torch.utils.flop_counter import FlopCounterMode

    batch, counts = make_batch(graphs), []
    for spec in ("fast", "reference"):
        torch.manual_seed(0)
        model = build_model(MODELS["egt"]).train()
        with kernels.using(spec), FlopCounterMode(display=False) as counter:
            (model(batch).graph ** 2).sum().backward()
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] > 0


def _ops(cfg: dict, batch, spec: str) -> set[str]:
    torch.manual_seed(0)
    model = build_model(cfg).train()
    with kernels.using(spec), torch.profiler.profile() as prof:
        (model(batch).graph ** 2).sum().backward()
    return {e.key for e in prof.key_averages()}


KERNEL_OPS = {
    "linear": "mkldnn::_linear_pointwise",
    "dropout_mask": "gtscale::keep_from_halves",
    "gated_attention": "gtscale::gated_attention",
    "sdpa": "aten::scaled_dot_product_attention",
}


def test_the_switch_runs_the_kernels_it_names(graphs, every_product_in_onednn):
    """`fast` runs every kernel, `reference` none, a list those it names."""
    batch = make_batch(graphs)
    egt, graphormer = MODELS["egt"], MODELS["graphormer"]
    ran = {spec: _ops(egt, batch, spec) | _ops(graphormer, batch, spec) for spec in ("fast", "reference", "linear,sdpa")}
    assert set(KERNEL_OPS.values()) <= ran["fast"]
    assert not set(KERNEL_OPS.values()) & ran["reference"]
    assert {op for op in KERNEL_OPS.values() if op in ran["linear,sdpa"]} == {KERNEL_OPS["linear"], KERNEL_OPS["sdpa"]}


def test_a_selection_names_known_kernels():
    assert kernels.parse("fast") == set(kernels.KERNELS) and kernels.parse("reference") == set()
    assert kernels.parse("linear, gated_attention") == {"linear", "gated_attention"}
    for bad in ("fastest", "linear,flash", ""):
        with pytest.raises(UserError, match="fast, reference or a comma-separated list"):
            kernels.parse(bad)


def test_the_environment_chooses_and_a_bad_value_is_one_error_at_the_first_step():
    code = ("from gtscale.models import kernels\n"
            "try:\n    print(kernels.use_kernel('linear'), kernels.use_kernel('sdpa'))\n"
            "except Exception as err:\n    print(type(err).__name__, err)")
    seen = {}
    for value in ("linear", "reference", "flash"):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "GTSCALE_KERNELS": value})
        seen[value] = run.stdout.strip()
    assert seen["linear"] == "True False" and seen["reference"] == "False False"
    assert seen["flash"].startswith("UserError GTSCALE_KERNELS / --kernels 'flash'")

