"""EGT's gated attention (eq. 4 and 8-9, egt.gated_attention) with a hand-written backward.

The function is egt.gated_attention's, heads-major: with g = σ(G)·gate_mask, keep the dropout
mask and c its scale (1 / keep rate),

    V̂ = ((softmax(Ĥ + logit_mask) ⊙ g ⊙ keep) (c·V)) ⊙ s,  s_i = ln(1 + Σ_j g_ij)

(s = 1 on the virtual nodes; num_virtual = -1 switches the scalers off). Autograd on that
expression keeps the softmax, the sigmoid, the gated map, the dropout mask and the dropped map of
every layer for backward; this keeps the softmax, the gates and a byte mask, and recomputes the
map. Elementwise passes over the [heads, B, M, M] maps are most of a layer's time outside its
matrix products, so the dropout scale c rides on V and on the incoming gradient ([.., M, d],
smaller than the map when d < M) instead of the map, and σ'(G)·gate_mask = g(1 - g) (gate_mask is
0 or 1) is one sigmoid_backward pass. Runs in Ĥ's dtype with autocast off: under autocast its
inputs already come in the low-precision dtype. The dropout mask is drawn by the caller, so both
passes are pure functions of their inputs.

One computation, two wrappers around it (`gated_attention` picks by device):
- an autograd.Function, which torch.compile traces through: on a GPU inductor fuses the gate,
  mask, dropout and scaler passes around the two products into a few Triton kernels;
- a pair of torch.library custom ops, which torch.compile keeps as opaque calls: on a CPU,
  inductor's C++ kernels for this chain (softmax reductions over rows of M ≈ 40 with the masks,
  gates and the pair gather fused into each pass) cost more than aten's vectorised kernels
  (`gtscale bench model --profile`, egt-small: 276 ms of a 1,296 ms compiled step; opaque, the
  compiled step went from 0.98× to 1.04× eager, docs/results/cpu-speed.md), so a compiled CPU
  model runs aten's kernels here and fuses the rest.
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import register_flop_formula


def _as_bytes(keep: torch.Tensor) -> torch.Tensor:
    """The bool keep mask as the uint8 0 / 1 it is stored as. A float map times either makes a
    float copy of the mask first (`aten::_to_copy`), but aten's uint8 → float conversion is
    vectorised and its bool → float one is not: 0.59 against 1.46 ms per [32, 32, 38, 38] map in
    place, two threads; 18 such products a step in egt-small. Same products, bit for bit."""
    return keep.view(torch.uint8)


def _forward(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale: float, num_virtual: int):
    """(V̂, probs, gates, V̂ before the scaler, scaler, degree); the last three are empty without scalers."""
    with torch.autocast(h_hat.device.type, enabled=False):
        dtype = h_hat.dtype
        probs = torch.softmax(h_hat + logit_mask.to(dtype), dim=-1)
        gates = torch.sigmoid(gate_logits.to(dtype)).mul_(gate_mask.to(dtype))
        attn = probs * gates
        v = v.to(dtype)
        if keep is not None:
            attn.mul_(_as_bytes(keep))
            v = v * scale
        out = torch.matmul(attn, v)
        if num_virtual < 0:
            return out, probs, gates, out.new_empty(0), out.new_empty(0), out.new_empty(0)
        degree = gates.sum(dim=-1, keepdim=True)
        scaler = torch.log1p(degree)
        scaler[:, :, :num_virtual] = 1.0
        return out * scaler, probs, gates, out, scaler, degree


def _backward(grad, probs, gates, keep, v, out, scaler, degree, scale: float, num_virtual: int):
    """(dĤ, dG, dV) from the incoming gradient and what _forward returned."""
    grad = grad.to(probs.dtype)
    v = v.to(probs.dtype)
    d_degree = None
    if num_virtual >= 0:
        d_degree = (grad * out).sum(dim=-1, keepdim=True).div_(degree + 1)
        d_degree[:, :, :num_virtual] = 0.0
        grad = grad * (scaler * scale if keep is not None else scaler)
    elif keep is not None:
        grad = grad * scale
    attn = probs * gates
    if keep is not None:
        attn.mul_(_as_bytes(keep))
    d_v = torch.matmul(attn.transpose(-1, -2), grad)
    del attn
    d_attn = torch.matmul(grad, v.transpose(-1, -2))
    if keep is not None:
        d_attn.mul_(_as_bytes(keep))
    d_probs = d_attn * gates
    d_gates = d_attn.mul_(probs)
    if d_degree is not None:
        d_gates.add_(d_degree)
    d_gate_logits = torch.ops.aten.sigmoid_backward(d_gates, gates)
    d_h_hat = torch._softmax_backward_data(d_probs, probs, -1, probs.dtype)
    return d_h_hat, d_gate_logits, d_v


class _Traced(torch.autograd.Function):
    """The wrapper torch.compile traces through (GPUs)."""

    @staticmethod
    def forward(ctx, h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale: float, num_virtual: int):
        out, probs, gates, raw, scaler, degree = _forward(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual)
        ctx.save_for_backward(probs, gates, keep, v, raw, scaler, degree)
        ctx.scale, ctx.num_virtual = scale, num_virtual
        return out

    @staticmethod
    def backward(ctx, grad):
        probs, gates, keep, v, raw, scaler, degree = ctx.saved_tensors
        d_h_hat, d_gate_logits, d_v = _backward(grad, probs, gates, keep, v, raw, scaler, degree, ctx.scale, ctx.num_virtual)
        return d_h_hat, d_gate_logits, d_v.to(v.dtype), None, None, None, None, None


@torch.library.custom_op("gtscale::gated_attention", mutates_args=())
def _opaque_forward(
    h_hat: torch.Tensor, gate_logits: torch.Tensor, v: torch.Tensor, logit_mask: torch.Tensor,
    gate_mask: torch.Tensor, keep: torch.Tensor | None, scale: float, num_virtual: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # row-major outputs, as the fake below says (elementwise results follow their inputs' layout)
    return tuple(t.contiguous() for t in _forward(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual))


@_opaque_forward.register_fake
def _(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual):
    out_shape, row_shape = (*h_hat.shape[:-1], v.shape[-1]), (*h_hat.shape[:-1], 1)
    maps = h_hat.new_empty(h_hat.shape), h_hat.new_empty(h_hat.shape)
    if num_virtual < 0:
        return h_hat.new_empty(out_shape), *maps, h_hat.new_empty(0), h_hat.new_empty(0), h_hat.new_empty(0)
    return h_hat.new_empty(out_shape), *maps, h_hat.new_empty(out_shape), h_hat.new_empty(row_shape), h_hat.new_empty(row_shape)


@torch.library.custom_op("gtscale::gated_attention_backward", mutates_args=())
def _opaque_backward(
    grad: torch.Tensor, probs: torch.Tensor, gates: torch.Tensor, keep: torch.Tensor | None, v: torch.Tensor,
    raw: torch.Tensor, scaler: torch.Tensor, degree: torch.Tensor, scale: float, num_virtual: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    d_h_hat, d_gate_logits, d_v = _backward(grad, probs, gates, keep, v, raw, scaler, degree, scale, num_virtual)
    return d_h_hat.contiguous(), d_gate_logits.contiguous(), d_v.to(v.dtype).contiguous()


@_opaque_backward.register_fake
def _(grad, probs, gates, keep, v, raw, scaler, degree, scale, num_virtual):
    return probs.new_empty(probs.shape), probs.new_empty(probs.shape), v.new_empty(v.shape)


def _save(ctx, inputs, output) -> None:
    h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual = inputs
    _, probs, gates, raw, scaler, degree = output
    ctx.save_for_backward(probs, gates, keep, v, raw, scaler, degree)
    ctx.mark_non_differentiable(probs, gates, raw, scaler, degree)
    ctx.scale, ctx.num_virtual = scale, num_virtual


def _opaque_autograd(ctx, grad, *unused_aux_grads):
    probs, gates, keep, v, raw, scaler, degree = ctx.saved_tensors
    d_h_hat, d_gate_logits, d_v = _opaque_backward(grad, probs, gates, keep, v, raw, scaler, degree, ctx.scale, ctx.num_virtual)
    return d_h_hat, d_gate_logits, d_v, None, None, None, None, None


_opaque_forward.register_autograd(_opaque_autograd, setup_context=_save)


# FLOPs as torch counts the reference's products (attention map × V forward, two such backward),
# so that a step's FLOP count and MFU do not depend on the kernel.
@register_flop_formula(torch.ops.gtscale.gated_attention)
def _forward_flops(h_hat_shape, gate_shape, v_shape, *args, **kwargs) -> int:
    return 2 * math.prod(h_hat_shape) * v_shape[-1]


@register_flop_formula(torch.ops.gtscale.gated_attention_backward)
def _backward_flops(grad_shape, probs_shape, gates_shape, keep_shape, v_shape, *args, **kwargs) -> int:
    return 4 * math.prod(probs_shape) * v_shape[-1]


def gated_attention(h_hat, gate_logits, v, logit_mask, gate_mask, keep: torch.Tensor | None, scale: float, num_virtual: int) -> torch.Tensor:
    """V̂ [heads, B, M, d] from Ĥ and G [heads, B, M, M], V [heads, B, M, d], the masks (broadcast
    over heads), the dropout keep mask or None with its scale, and the number of virtual nodes
    (-1: no degree scalers)."""
    if h_hat.device.type == "cpu":
        return _opaque_forward(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual)[0]
    return _Traced.apply(h_hat, gate_logits, v, logit_mask, gate_mask, keep, scale, num_virtual)
