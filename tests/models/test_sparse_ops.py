"""The edge-list products: values against a dense reference, gradients by gradcheck, and the
chunking (forced small here) changes nothing; the sparse CSR kernels (edge_layouts) give the
gathering form's values and gradients, also summed into src (the layouts transposed)."""

import pytest
import torch

from gtscale.models import sparse_ops
from gtscale.models.sparse_ops import edge_dot, edge_layouts, edge_sum, segment_softmax


@pytest.fixture(params=[1 << 24, 7, "sparse"], ids=["one-chunk", "many-chunks", "sparse-kernels"])
def chunk(request, monkeypatch):
    """The layouts to pass: None (the gathering form, in one chunk or many) or the sparse kernels'."""
    if request.param == "sparse":
        return lambda src, dst, n: edge_layouts(src, dst, n, torch.float64)
    monkeypatch.setattr(sparse_ops, "_CHUNK_ELEMENTS", request.param)
    return lambda src, dst, n: None


def _graph(n=6, e=15, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (e,), generator=gen), torch.randint(0, n - 1, (e,), generator=gen), n  # node n-1: no in-edges


def test_values_match_a_dense_reference(chunk):
    src, dst, n = _graph()
    layouts = chunk(src, dst, n)
    q, k = torch.randn(n, 2, 3, dtype=torch.float64), torch.randn(n, 2, 3, dtype=torch.float64)
    s = edge_dot(q, k, src, dst, layouts)
    torch.testing.assert_close(s, (q[dst] * k[src]).sum(-1))
    dense = torch.zeros(2, n, n, dtype=torch.float64)
    dense.index_put_((torch.arange(2)[:, None], dst[None], src[None]), s.t(), accumulate=True)
    torch.testing.assert_close(edge_sum(s, k, src, dst, n, layouts), torch.einsum("hcb,bhy->chy", dense, k))
    into_src = layouts and layouts.transposed()
    torch.testing.assert_close(edge_sum(s, q, dst, src, n, into_src), torch.einsum("hcb,chy->bhy", dense, q))


def test_gradients(chunk):
    src, dst, n = _graph()
    q = torch.randn(n, 2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(n, 2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(len(src), 2, dtype=torch.float64, requires_grad=True)
    layouts = chunk(src, dst, n)
    assert torch.autograd.gradcheck(lambda a, b: edge_dot(a, b, src, dst, layouts), (q, k))
    assert torch.autograd.gradcheck(lambda a, b: edge_sum(a, b, src, dst, n, layouts), (w, k))
    assert torch.autograd.gradcheck(lambda a, b: edge_sum(a, b, dst, src, n, layouts and layouts.transposed()), (w, k))


def test_one_operand_for_every_head_equals_it_repeated_per_head(chunk):
    """k of edge_dot and v of edge_sum may be [N, d], read by every head (the sparse ET's targeted
    step dots g itself): values and gradients as for the [N, H, d] tensor of H copies, also where
    the sources and destinations are different node sets (layouts of num_nodes → num_dst)."""
    src, dst, n = _graph()
    rows = 4  # destinations: 0..3
    dst = dst % rows
    layouts = chunk(src, dst, n)
    if layouts is not None:
        layouts = edge_layouts(src, dst, n, torch.float64, num_dst=rows)
    q = torch.randn(rows, 2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(len(src), 2, dtype=torch.float64, requires_grad=True)
    for first, shared, repeated in [
        (q, lambda a, b: edge_dot(a, b, src, dst, layouts), lambda a, b: edge_dot(a, b[:, None].expand(-1, 2, -1), src, dst)),
        (w, lambda a, b: edge_sum(a, b, src, dst, rows, layouts), lambda a, b: edge_sum(a, b[:, None].expand(-1, 2, -1), src, dst, rows)),
    ]:
        torch.testing.assert_close(shared(first, k), repeated(first, k))
        grads = torch.autograd.grad((shared(first, k) ** 2).sum(), (first, k))
        torch.testing.assert_close(grads, torch.autograd.grad((repeated(first, k) ** 2).sum(), (first, k)))
        assert torch.autograd.gradcheck(shared, (first, k))


def test_segment_softmax_sums_to_one_and_skips_empty_segments():
    src, dst, n = _graph()
    s = torch.randn(len(src), 2)
    p, lse, has = segment_softmax(s, dst, n)
    sums = torch.zeros(n, 2).index_add(0, dst, p)
    torch.testing.assert_close(sums[has], torch.ones(int(has.sum()), 2))
    assert not has[n - 1] and (lse[n - 1] == 0).all()
    ref = torch.stack([torch.logsumexp(s[dst == c], 0) if (dst == c).any() else torch.zeros(2) for c in range(n)])
    torch.testing.assert_close(lse, ref)
    assert (~has).sum() >= 2  # the fixture graph has empty segments besides the last node
