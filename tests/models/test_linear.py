"""models/linear.py and its kernel, kernels/linear.py: fp32 CPU weight products through oneDNN
compute F.linear's function, with its gradients, in every layout the models hand it, eager and
compiled as one graph."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gtscale.models import kernels
from gtscale.models.kernels import linear as onednn
from gtscale.models.linear import Linear, linear, matmul_nt

pytestmark = pytest.mark.skipif(not onednn.HAVE_ONEDNN, reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def every_product_in_onednn(monkeypatch):
    """The kernel on, whatever GTSCALE_KERNELS says; and the tests' products are small: below
    ONEDNN_MIN_FLOPS they would stay with F.linear."""
    monkeypatch.setattr(onednn, "ONEDNN_MIN_FLOPS", 0)
    with kernels.using("fast"):
        yield


def _ops(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def _grads(fn, *tensors):
    # leaves with the operands' own strides (clone() would make the row slice contiguous)
    leaves = [torch.empty_strided(t.shape, t.stride()).copy_(t).requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach()] + [t.grad for t in leaves]


def _layouts():
    """(name, x, weight): row-major, transposed, the strided row slice that EGT's graph readout
    hands its head (rows 19,456 apart for 2,048 columns), which once took a 700× slower path, and
    an input of fewer than 16 features."""
    torch.manual_seed(0)
    h = torch.randn(8, 12, 64)
    return [
        ("row-major", torch.randn(37, 24), torch.randn(40, 24)),
        ("transposed input", torch.randn(24, 37).t(), torch.randn(40, 24)),
        ("transposed weight", torch.randn(37, 24), torch.randn(24, 40).t()),
        ("strided row slice", h[:, :3].reshape(8, -1), torch.randn(16, 3 * 64)),
        ("three dims", torch.randn(5, 7, 24), torch.randn(40, 24)),
        ("narrow input", torch.randn(37, 10), torch.randn(32, 10)),  # its weight gradient is taken as (xᵀ g)ᵀ
    ]


@pytest.mark.parametrize("name,x,weight", _layouts(), ids=[c[0] for c in _layouts()])
def test_onednn_linear_equals_f_linear_with_gradients(name, x, weight):
    bias = torch.randn(weight.shape[0])
    assert _grads(lambda *t: t[0], x)[0].stride() == x.stride()  # the layout reaches linear as given
    ours = _grads(linear, x, weight, bias)
    reference = _grads(F.linear, x, weight, bias)
    for got, want in zip(ours, reference):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _calls(fn) -> dict[str, int]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


def test_the_products_run_in_onednn_and_count_their_flops():
    x, layer = torch.randn(33, 24, requires_grad=True), Linear(24, 40)
    calls = _calls(lambda: layer(x).sum().backward())
    # the forward and the input gradient in oneDNN, the weight gradient (gᵀ x) in aten's mm
    assert calls.get("mkldnn::_linear_pointwise") == 2 and calls.get("aten::mm") == 1 and "aten::addmm" not in calls
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * 33 * 24 * 40  # forward, input and weight gradients


def test_bf16_autocast_and_other_dtypes_stay_with_f_linear():
    x, layer = torch.randn(5, 8), Linear(8, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
        assert "mkldnn::_linear_pointwise" not in _ops(lambda: layer(x))
    assert linear(x.double(), layer.weight.double()).dtype == torch.float64


def test_products_below_the_threshold_stay_with_f_linear(monkeypatch):
    x, layer = torch.randn(10, 20), Linear(20, 30)  # 2 · 10 · 20 · 30 = 12,000 FLOP
    monkeypatch.setattr(onednn, "ONEDNN_MIN_FLOPS", 12_001)
    assert "mkldnn::_linear_pointwise" not in _ops(lambda: layer(x))
    monkeypatch.setattr(onednn, "ONEDNN_MIN_FLOPS", 12_000)
    assert "mkldnn::_linear_pointwise" in _ops(lambda: layer(x))


def test_compiled_in_one_graph_equals_eager():
    torch.manual_seed(0)
    x, weight, bias = torch.randn(9, 16), torch.randn(12, 16), torch.randn(12)
    compiled = torch.compile(lambda a, w, b: torch.tanh(linear(a, w, b)) @ matmul_nt(w, a), fullgraph=True, backend="aot_eager")
    for got, want in zip(_grads(compiled, x, weight, bias), _grads(lambda a, w, b: torch.tanh(F.linear(a, w, b)) @ (w @ a.t()), x, weight, bias)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_without_the_kernel_products_are_f_linear():
    x, layer = torch.randn(4, 8), Linear(8, 3)
    for spec in ("reference", "sdpa,gated_attention"):
        with kernels.using(spec):
            ops = _ops(lambda: layer(x))
        assert "aten::addmm" in ops and not any("mkldnn" in op for op in ops)


def test_the_weight_gradient_copies_no_activation():
    """oneDNN's linear takes its input row-major only: handed gᵀ and xᵀ for the weight gradient, it
    copied both [M, ·] activations first (1.4-2.8× the time of aten's mm reading them in place)."""
    x, layer = torch.randn(300, 24, requires_grad=True), Linear(24, 40)
    out, grad = layer(x), torch.randn(300, 40)  # a row-major incoming gradient (sum()'s is a stride-0 view)
    calls = _calls(lambda: out.backward(grad))
    assert not {"aten::clone", "aten::contiguous", "aten::copy_"} & set(calls), calls
