"""fp32 CPU weight products through oneDNN: F.linear's function, faster on AMD EPYC.

Why: PyTorch's CPU wheels run an fp32 `x @ Wᵀ` (F.linear, mm, addmm) through MKL's sgemm, and
MKL picks its fast AVX-512 kernels only on Intel processors. On AMD EPYC (Zen 5, the machine this
was measured on) it runs a generic path: ~200 GFLOP/s on two cores, where oneDNN, the other BLAS
inside the same wheel, gets ~480 GFLOP/s for the same fp32 product (docs/results/cpu-speed.md).
Matrix products are about half of a CPU training step, so the models' weight products go to
oneDNN's `mkldnn::_linear_pointwise` (exact fp32: same inputs, another summation order) where
`applies`: fp32 tensors on a CPU, outside autocast (under CPU autocast, torch already runs bf16
products in oneDNN), with a torch built with oneDNN, and products of at least ONEDNN_MIN_FLOPS.

The product is a torch.library custom op with its own backward (the input gradient is a oneDNN
product too, the weight gradient aten's mm: see _backward), so that torch.compile treats it as one
opaque kernel: inductor's own lowering of `_linear_pointwise` is for frozen inference weights only
and refuses trainable ones.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

#: Smaller products stay with F.linear. A oneDNN call through this custom op costs ~25 µs more than
#: F.linear's ~7 µs, which MKL's slower kernels repay only from about 8 MFLOP, and the quickstart's
#: EGT (widths 64: products of 5-35 MFLOP) trained 4-6 % slower with its products above 8 MFLOP
#: in oneDNN (`gtscale bench train`); egt-small's smallest is its head's 67 MFLOP.
ONEDNN_MIN_FLOPS = 32_000_000

HAVE_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@torch.library.custom_op("gtscale::matmul_nt", mutates_args=())
def _matmul_nt(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """a [M, K] @ b [N, K]ᵀ (+ bias [N]) → [M, N], by oneDNN; a and b may be transposed views."""
    return torch.ops.mkldnn._linear_pointwise(_row_or_column_major(a), _row_or_column_major(b), bias, "none", [], "")


def _row_or_column_major(x: torch.Tensor) -> torch.Tensor:
    """x itself when it is row-major or a transposed row-major matrix, else a row-major copy.

    oneDNN takes a transposed weight at full speed (a transposed input it copies), but a matrix
    whose rows lie further apart than its width (a slice such as EGT's virtual-node rows, stride
    19,456 for 2,048 columns) sent one 32 × 2,048 × 512 product through a path 700× slower than the copy and the product together."""
    return x if x.is_contiguous() or x.t().is_contiguous() else x.contiguous()


@_matmul_nt.register_fake
def _(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return a.new_empty(a.shape[0], b.shape[0])


def _save(ctx, inputs, output) -> None:
    a, b, bias = inputs
    ctx.save_for_backward(a, b)
    ctx.has_bias = bias is not None


def _backward(ctx, grad: torch.Tensor):
    a, b = ctx.saved_tensors
    grad_a = _matmul_nt(grad, b.t(), None) if ctx.needs_input_grad[0] else None  # g @ b
    # The weight gradient reduces over the rows of both activations, and oneDNN's linear takes its
    # input only row-major: it would copy both transposed [M, ·] activations first. aten's mm reads
    # them transposed in place: 1.4-2.8× faster for egt-small's weight gradients on a 2-core AMD EPYC
    # (AVX2), e.g. 6.1 against 11.4 ms for 46,208 × 64 × 64 and 16.3 against 23.1 ms for
    # 1,216 × 1,536 × 512 (docs/results/cpu-speed.md, "Weight products").
    # MKL's product with a right factor of fewer than 16 columns is 5-10× slower on this AMD EPYC
    # (3.9 against 41 ms for [32, M] @ [M, 10] at M = 160 k, the sparse ET's embedding of T-Social's
    # 10 features): such an activation goes on the left, (aᵀ g)ᵀ = gᵀ a
    grad_b = None
    if ctx.needs_input_grad[1]:
        narrow = a.shape[1] < min(16, grad.shape[1])
        grad_b = torch.mm(a.t(), grad).t() if narrow else torch.mm(grad.t(), a)  # gᵀ @ a
    grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return grad_a, grad_b, grad_bias


_matmul_nt.register_autograd(_backward, setup_context=_save)


@register_flop_formula(torch.ops.gtscale.matmul_nt)
def _flops(a_shape, b_shape, *args, **kwargs) -> int:
    """2·M·K·N, as torch counts mm: FLOP counts and MFU see the product under either library."""
    return 2 * a_shape[0] * a_shape[1] * b_shape[0]


def applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether oneDNN runs F.linear(x, weight, bias) faster than F.linear (module docstring)."""
    return (
        HAVE_ONEDNN and x.device.type == "cpu"
        and x.dtype == torch.float32 and weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and not torch.is_autocast_enabled("cpu")
        and 2 * x.numel() * weight.shape[0] >= ONEDNN_MIN_FLOPS
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) by oneDNN, where `applies`."""
    out = _matmul_nt(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])
