"""Edge-list primitives with memory O(N·d + E·H): no N×N tensor and no [E, H, d] tensor kept.

An edge e = (src[e] → dst[e]) lets node dst[e] read node src[e]. Two products and a softmax:

    edge_dot(q, k, src, dst)[e, h]   = Σ_α q[dst[e], h, α] · k[src[e], h, α]     (SDDMM)
    edge_sum(w, v, src, dst)[n, h, :] = Σ_{e: dst[e] = n} w[e, h] · v[src[e], h, :] (SpMM)
    segment_softmax(s, dst)           = softmax of s over the edges of each dst, and its logsumexp

A plain gather + index_add would keep the [E, H, d] gather for backward (E·H·d floats, 16× the
scores at d = 16); the two autograd functions here process edges in chunks of `_CHUNK_ELEMENTS`
gathered elements and save only their inputs, recomputing the gathers in backward (compiled, one fused kernel per product instead). The price is time:
about twice the gathers of a plain autograd version, which keeps them (`gtscale bench model` on
the sparse ET measures both). Everything runs in the inputs' dtype except the softmax, which runs
in fp32 (bf16-safe).
"""

from __future__ import annotations

import torch

#: Gathered elements per chunk (edges × heads × width): bounds the transient [chunk, H, d] tensors.
_CHUNK_ELEMENTS = 1 << 24


def _chunks(num_edges: int, per_edge: int):
    if torch.compiler.is_compiling():
        # the compiler fuses gather, product and sum: nothing [E, H, d] is materialised to bound
        yield slice(0, num_edges)
        return
    step = max(1, _CHUNK_ELEMENTS // max(per_edge, 1))
    for start in range(0, num_edges, step):
        yield slice(start, min(start + step, num_edges))


def _edge_dot(q, k, src, dst):
    out = q.new_empty(src.shape[0], q.shape[1])
    for c in _chunks(src.shape[0], q.shape[1] * q.shape[2]):
        out[c] = (q[dst[c]] * k[src[c]]).sum(-1)
    return out


def _edge_sum(w, v, src, dst, num_nodes):
    out = v.new_zeros(num_nodes, *v.shape[1:])
    for c in _chunks(src.shape[0], v.shape[1] * v.shape[2]):
        out.index_add_(0, dst[c], v[src[c]] * w[c, :, None])
    return out


class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, src, dst):
        ctx.save_for_backward(q, k, src, dst)
        return _edge_dot(q, k, src, dst)

    @staticmethod
    def backward(ctx, grad):
        q, k, src, dst = ctx.saved_tensors
        grad = grad.to(q.dtype)
        dq = _edge_sum(grad, k, src, dst, q.shape[0]) if ctx.needs_input_grad[0] else None
        dk = _edge_sum(grad, q, dst, src, k.shape[0]) if ctx.needs_input_grad[1] else None
        return dq, dk, None, None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, v, src, dst, num_nodes):
        ctx.save_for_backward(w, v, src, dst)
        return _edge_sum(w, v, src, dst, num_nodes)

    @staticmethod
    def backward(ctx, grad):
        w, v, src, dst = ctx.saved_tensors
        grad = grad.to(v.dtype)
        dw = _edge_dot(grad, v, src, dst).to(w.dtype) if ctx.needs_input_grad[0] else None
        dv = _edge_sum(w, grad, dst, src, v.shape[0]) if ctx.needs_input_grad[1] else None
        return dw, dv, None, None, None


def edge_dot(q: torch.Tensor, k: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """q [N, H, d], k [N, H, d] → [E, H]: the dot product of dst's q and src's k per head."""
    dtype = torch.promote_types(q.dtype, k.dtype)
    return _EdgeDot.apply(q.to(dtype), k.to(dtype), src, dst)


def edge_sum(w: torch.Tensor, v: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """w [E, H], v [N_src, H, d] → [num_nodes, H, d]: Σ over each dst's edges of w · v[src]."""
    return _EdgeSum.apply(w.to(v.dtype), v, src, dst, num_nodes)


def segment_softmax(scores: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores [E, H] → (p [E, H] fp32, logsumexp [num_nodes, H] fp32, has_edges bool [num_nodes]).

    Nodes without an incoming edge get logsumexp 0 and has_edges False (their sum is empty)."""
    s = scores.float()
    heads = s.shape[1]
    idx = dst[:, None].expand(-1, heads)
    peak = s.new_full((num_nodes, heads), float("-inf")).scatter_reduce(0, idx, s.detach(), "amax", include_self=True)
    has_edges = torch.isfinite(peak[:, 0])
    peak = torch.where(torch.isfinite(peak), peak, 0.0)
    e = torch.exp(s - peak[dst])
    z = s.new_zeros(num_nodes, heads).index_add(0, dst, e)
    p = e / z[dst]
    lse = torch.where(has_edges[:, None], torch.log(z.clamp_min(torch.finfo(z.dtype).tiny)) + peak, 0.0)
    return p, lse, has_edges


def count_per_index(index: torch.Tensor, size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """How often each of 0..size-1 occurs in `index`, as `dtype` [size]: bincount with a fixed
    output size (bincount's size depends on the data, which a compiled graph cannot have)."""
    return torch.zeros(size, dtype=dtype, device=index.device).index_add_(0, index, torch.ones(index.shape[0], dtype=dtype, device=index.device))
