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

Sparse kernels. On a CPU, in eager mode and in fp32 / fp64, the products run as torch's sparse CSR
kernels instead: the edges grouped by dst are a CSR matrix [dst × src], edge_dot its sampled
dense-dense product (SDDMM: torch.sparse.sampled_addmm) and edge_sum its sparse-dense product
(SpMM: torch.sparse.mm), one call per head; sums into src use the edges grouped by src. They
gather nothing, and run 7-10× faster than the gathering form on a 2-core CPU (fan-out batches of
the sparse ET). A model builds the layouts once per forward (`edge_layouts`: two stable sorts of
the edges) and passes them to every product over the same edges; `edge_layouts` returns None
where the gathering form runs (compiled, GPU, bf16), which stays the reference: the tests hold
both to the same values and gradients.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
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


@dataclass
class RowLayout:
    """Edges grouped by one end (the rows): `order` sorts them (stably) so, `crow` [rows + 1] is the
    CSR row pointer and `col` the other end of each sorted edge."""

    order: torch.Tensor
    crow: torch.Tensor
    col: torch.Tensor
    shape: tuple[int, int]  # (rows, columns)

    def matrix(self, values: torch.Tensor) -> torch.Tensor:
        """The CSR matrix with `values` in sorted order (duplicate edges sum)."""
        with warnings.catch_warnings():  # torch calls its sparse CSR support beta
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(self.crow, self.col, values, self.shape, check_invariants=False)


@dataclass
class EdgeLayouts:
    """The edges src → dst grouped by dst (products into dst) and by src (sums into src)."""

    by_dst: RowLayout
    by_src: RowLayout

    def transposed(self) -> EdgeLayouts:
        """The layouts of the reversed edges dst → src."""
        return EdgeLayouts(self.by_src, self.by_dst)


def _row_layout(rows: torch.Tensor, cols: torch.Tensor, num_rows: int, num_cols: int) -> RowLayout:
    # numpy's stable sort takes a fifth of torch's time on the CPU for edge lists, which come in runs
    order = torch.from_numpy(np.argsort(rows.numpy(), kind="stable"))
    crow = torch.zeros(num_rows + 1, dtype=torch.long, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=crow[1:])
    return RowLayout(order, crow, cols[order], (num_rows, num_cols))


def edge_layouts(src: torch.Tensor, dst: torch.Tensor, num_nodes: int, dtype: torch.dtype = torch.float32,
                 num_dst: int | None = None) -> EdgeLayouts | None:
    """The CSR layouts of edges src → dst among num_nodes nodes (or from num_nodes sources into
    `num_dst` other rows) for the sparse kernels, or None where the gathering form runs: compiled,
    off the CPU, or below fp32 (the one place that chooses)."""
    if torch.compiler.is_compiling() or src.device.type != "cpu" or dtype not in (torch.float32, torch.float64):
        return None
    num_dst = num_nodes if num_dst is None else num_dst
    return EdgeLayouts(_row_layout(dst, src, num_dst, num_nodes), _row_layout(src, dst, num_nodes, num_dst))


def _head(x: torch.Tensor, h: int) -> torch.Tensor:
    """Head h of x [C, H, d], or x [C, d] itself (one tensor that every head reads)."""
    return x if x.dim() == 2 else x[:, h]


def _sparse_edge_dot(q, k, layout: RowLayout):
    """[E, H]: q of each edge's row · k of its column, by SDDMM, in the edges' own order."""
    pattern = layout.matrix(q.new_zeros(layout.col.shape[0]))
    out = q.new_empty(layout.col.shape[0], q.shape[1])
    for h in range(q.shape[1]):
        out[layout.order, h] = torch.sparse.sampled_addmm(pattern, q[:, h].contiguous(), _head(k, h).t(), beta=0.0).values()
    return out


def _sparse_edge_sum(w, v, layout: RowLayout, sum_heads: bool = False):
    """[rows, H, d]: Σ over each row's edges of w · v of the edge's column, by SpMM; with
    `sum_heads`, [rows, d] summed over the heads (accumulated in place: no [rows, H, d] tensor)."""
    w = w[layout.order]
    if sum_heads:
        out = None
        for h in range(w.shape[1]):
            m = layout.matrix(w[:, h].contiguous())
            out = torch.sparse.mm(m, _head(v, h)) if out is None else out.addmm_(m, _head(v, h))
        return out
    return torch.stack([torch.sparse.mm(layout.matrix(w[:, h].contiguous()), _head(v, h)) for h in range(w.shape[1])], dim=1)


class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, src, dst, layouts):
        ctx.save_for_backward(q, k, src, dst)
        ctx.layouts = layouts
        return _edge_dot(q, k, src, dst) if layouts is None else _sparse_edge_dot(q, k, layouts.by_dst)

    @staticmethod
    def backward(ctx, grad):
        q, k, src, dst = ctx.saved_tensors
        grad, layouts = grad.to(q.dtype), ctx.layouts
        dq = dk = None
        if ctx.needs_input_grad[0]:
            dq = _edge_sum(grad, k, src, dst, q.shape[0]) if layouts is None else _sparse_edge_sum(grad, k, layouts.by_dst)
        if ctx.needs_input_grad[1]:
            dk = _edge_sum(grad, q, dst, src, k.shape[0]) if layouts is None else _sparse_edge_sum(grad, q, layouts.by_src, k.dim() == 2)
        return dq, dk, None, None, None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, v, src, dst, num_nodes, layouts):
        ctx.save_for_backward(w, v, src, dst)
        ctx.layouts = layouts
        return _edge_sum(w, v, src, dst, num_nodes) if layouts is None else _sparse_edge_sum(w, v, layouts.by_dst)

    @staticmethod
    def backward(ctx, grad):
        w, v, src, dst = ctx.saved_tensors
        grad, layouts = grad.to(v.dtype), ctx.layouts
        dw = dv = None
        if ctx.needs_input_grad[0]:
            dw = (_edge_dot(grad, v, src, dst) if layouts is None else _sparse_edge_dot(grad, v, layouts.by_dst)).to(w.dtype)
        if ctx.needs_input_grad[1]:
            dv = _edge_sum(w, grad, dst, src, v.shape[0]) if layouts is None else _sparse_edge_sum(w, grad, layouts.by_src, v.dim() == 2)
        return dw, dv, None, None, None, None


def edge_dot(q: torch.Tensor, k: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, layouts: EdgeLayouts | None = None) -> torch.Tensor:
    """q [N_dst, H, d], k [N_src, H, d] (or [N_src, d], the same for every head) → [E, H]: the dot
    product of dst's q and src's k per head.
    `layouts`: edge_layouts(src, dst, N_src, dtype, N_dst) for the sparse kernels (None: the gathering form)."""
    dtype = torch.promote_types(q.dtype, k.dtype)
    layouts = layouts if dtype in (torch.float32, torch.float64) else None
    if k.dim() == 2 and layouts is None:
        k = k.unsqueeze(1).expand(-1, q.shape[1], -1)
    return _EdgeDot.apply(q.to(dtype), k.to(dtype), src, dst, layouts)


def edge_sum(w: torch.Tensor, v: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_nodes: int,
             layouts: EdgeLayouts | None = None) -> torch.Tensor:
    """w [E, H], v [N_src, H, d] (or [N_src, d], the same for every head) → [num_nodes, H, d]:
    Σ over each dst's edges of w · v[src].
    `layouts`: edge_layouts(src, dst, N_src, dtype, num_nodes) for the sparse kernels (None: the gathering form)."""
    if layouts is not None and (v.dtype not in (torch.float32, torch.float64) or layouts.by_dst.shape != (num_nodes, v.shape[0])):
        layouts = None
    if v.dim() == 2 and layouts is None:
        v = v.unsqueeze(1).expand(-1, w.shape[1], -1)
    return _EdgeSum.apply(w.to(v.dtype), v, src, dst, num_nodes, layouts)


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
