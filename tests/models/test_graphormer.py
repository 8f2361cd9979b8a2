"""Graphormer specifics: the attention bias (built once, in the logits' dtype, with the paper's
spatial buckets, edge encoding and [VNode] distance) and the centrality encoding."""

from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from model_fixtures import TINY_GRAPHORMER, make_batch
from gtscale.format.schema import SPD_UNREACHABLE
from gtscale.models import build_model
from gtscale.models import graphormer as graphormer_module
from gtscale.models import kernels
from gtscale.models.embeddings import MASK_VALUE


def _graphormer(**overrides):
    torch.manual_seed(0)
    return build_model({**TINY_GRAPHORMER, **overrides}).eval()


def _layer_biases(model, batch, autocast=False):
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda m, args: seen.append(args[2])) for layer in model.layers]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(batch)
    for hook in hooks:
        hook.remove()
    return seen


def test_bias_is_built_once_and_shared_by_every_layer(graphs):
    model = _graphormer()
    with mock.patch.object(type(model), "attention_bias", autospec=True, side_effect=type(model).attention_bias) as built:
        biases = _layer_biases(model, make_batch(graphs))
    assert built.call_count == 1
    assert len(biases) == TINY_GRAPHORMER["num_layers"] and all(b is biases[0] for b in biases)


@pytest.mark.parametrize("autocast, dtype", [(False, torch.float32), (True, torch.bfloat16)])
def test_bias_has_the_logits_dtype(graphs, autocast, dtype):
    bias = _layer_biases(_graphormer(), make_batch(graphs), autocast)[0]
    assert bias.dtype == dtype


def test_attention_runs_through_sdpa(graphs):
    model = _graphormer()
    with mock.patch.object(graphormer_module.F, "scaled_dot_product_attention", wraps=F.scaled_dot_product_attention) as sdpa:
        with torch.no_grad(), kernels.using("fast"):
            model(make_batch(graphs))
    assert sdpa.call_count == TINY_GRAPHORMER["num_layers"]


def test_cpu_training_with_attention_dropout_runs_the_reference_with_keep_mask(graphs):
    """On a CPU with attention dropout, each layer runs biased_attention (SDPA would run the same
    math with bernoulli draws) on keep_mask's draw; it is SDPA's output on the map dropped by that
    draw, and with every entry kept it is SDPA's output."""
    from gtscale.models.layers import keep_mask

    model = _graphormer(attention_dropout=0.3).train()
    with mock.patch.object(graphormer_module, "biased_attention", wraps=graphormer_module.biased_attention) as written, \
            mock.patch.object(graphormer_module.F, "scaled_dot_product_attention", wraps=F.scaled_dot_product_attention) as sdpa:
        model(make_batch(graphs)).graph.sum().backward()
    assert written.call_count == TINY_GRAPHORMER["num_layers"] and sdpa.call_count == 0
    assert all(call.args[4] is not None for call in written.call_args_list)  # a keep mask each

    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 6, 8, dtype=torch.double) for _ in range(3))
    bias = torch.randn(2, 4, 6, 6, dtype=torch.double)
    bias[0, :, :, 5] = MASK_VALUE  # a padding key
    keep, scale = keep_mask((2, 4, 6, 6), 0.3, torch.device("cpu"))
    got = graphormer_module.biased_attention(q, k, v, bias, keep, scale)
    attn = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5 + bias, dim=-1)
    torch.testing.assert_close(got, (attn * keep * scale) @ v)
    torch.testing.assert_close(graphormer_module.biased_attention(q, k, v, bias, torch.ones_like(keep), 1.0),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_bias_layout(graphs):
    """Spatial bucket s+1 for hop count s (capped), the last row for unreachable pairs, t between
    the [VNode] and everything, MASK_VALUE on padding keys."""
    model = _graphormer()
    num_spatial = TINY_GRAPHORMER["num_spatial"]
    with torch.no_grad():
        model.spatial.weight.copy_(torch.arange(num_spatial, dtype=torch.float32)[:, None])
        model.path_encoding.hop_weight.zero_()
        model.virtual_distance.fill_(-7.0)
    batch = make_batch(graphs, pad_to=13)
    with torch.no_grad():
        bias = model.attention_bias(batch, torch.float32)
    real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
    spd = batch.spd
    expected = torch.where(spd == SPD_UNREACHABLE, num_spatial - 1, (spd + 1).clamp(max=num_spatial - 2)).float()
    pair = bias[:, 0, 1:, 1:]
    assert torch.equal(pair[real], expected[real])
    assert (pair[real & (spd == SPD_UNREACHABLE)] == num_spatial - 1).all()
    assert (bias[:, :, 0, 0] == -7.0).all()
    real_key = torch.nn.functional.pad(batch.node_mask, (1, 0), value=True)
    for b in range(len(graphs)):
        assert (bias[b, :, 0, real_key[b]] == -7.0).all()
        assert (bias[b, :, 1:, 0] == -7.0).all()
        assert (bias[b, :, :, ~real_key[b]] == MASK_VALUE).all()


def test_edge_encoding_matches_graphormer_formula(graphs):
    """c_ij = Σ_n (mean_f table[x_nf]) · W_n / min(max(spd, 1), D), as graphormer_layers.py."""
    model = _graphormer()
    enc = model.path_encoding
    batch = make_batch(graphs)
    hops = enc.max_dist
    with torch.no_grad():
        fast = enc(batch.path_edges, batch.spd)
        rows = enc.edges.rows(batch.path_edges[:, :, :, :hops])
        emb = enc.edges.table.weight[rows].mean(dim=-2)  # [B, N, N, D, H]
        per_hop = torch.einsum("bijdh,dhk->bijdk", emb, enc.hop_weight[:hops])
        slow = per_hop.sum(dim=3) / batch.spd.clamp(1, hops).unsqueeze(-1).float()
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-5)
    assert fast.abs().sum() > 0


def test_degree_rows():
    model = _graphormer()
    rows = TINY_GRAPHORMER["num_in_degree"]
    degree = torch.tensor([[0, 1, 4, 9, 0]])
    mask = torch.tensor([[True, True, True, True, False]])
    assert model._degree_rows(degree, mask, rows).tolist() == [[1, 2, 5, rows - 1, 0]]


def test_missing_path_edges_is_an_error(graphs):
    batch = make_batch(graphs)
    batch.path_edges = None
    with pytest.raises(ValueError, match="path_edges"):
        _graphormer()(batch)


def test_shorter_path_tensor_than_max_dist(graphs):
    """A loader may cut path_edges to the longest path in the batch: same result."""
    model = _graphormer(multi_hop_max_dist=6)
    batch = make_batch(graphs)
    padded = make_batch(graphs)
    padded.path_edges = F.pad(batch.path_edges, (0, 0, 0, 2))
    with torch.no_grad():
        torch.testing.assert_close(model(batch).graph, model(padded).graph)
