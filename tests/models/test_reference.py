"""The packed, heads-major models against plain dense transcriptions of the papers' equations
(einsum attention over the padded batch, masks added to the logits as the authors do), sharing
the models' parameters. Agreement means packing, layouts and fused tables change nothing."""

import math

import pytest
import torch
import torch.nn.functional as F

from model_fixtures import TINY_EGT, TINY_GRAPHORMER, make_batch
from gtscale.models import build_model


def _ffn(ffn, x):
    return ffn.fc2(ffn.act(ffn.fc1(ffn.ln(x))))


def dense_egt(model, batch):
    """EGT eq. 3-9 on dense [B, M, ...] tensors, the authors' way."""
    cfg = model.cfg
    v = cfg.num_virtual_nodes
    h, e = model._inputs(batch)
    real = torch.cat([batch.node_mask.new_ones(batch.num_graphs, v), batch.node_mask], dim=1).float()
    mask = (real[:, :, None, None] * real[:, None, :, None] - 1) * 1e9  # [B, M, M, 1], key and query
    if cfg.constrained:
        near = F.pad(batch.spd <= 1, (v, 0, v, 0), value=True).float()
        mask = mask + (near[..., None] - 1) * 1e9
    heads, d = cfg.num_heads, cfg.node_width // cfg.num_heads
    for layer in model.layers:
        h_ln, e_ln = layer.ln_h(h), layer.ln_e(e)
        q, k, val = layer.qkv(h_ln).split(cfg.node_width, dim=-1)
        q, k, val = (t.unflatten(-1, (heads, d)) for t in (q, k, val))
        edge_terms = layer.edge_in(e_ln)
        bias, gate_logits = edge_terms[..., :heads], edge_terms[..., heads:]
        a_hat = torch.einsum("bihd,bjhd->bijh", q, k) / math.sqrt(d)
        h_hat = a_hat.clamp(*cfg.clip_logits) + bias
        attn = torch.softmax(h_hat + mask, dim=2)
        if cfg.gated:
            gates = torch.sigmoid(gate_logits + mask)
            attn = attn * gates
        out = torch.einsum("bijh,bjhd->bihd", attn, val)
        if cfg.scale_degree:
            scaler = torch.log1p(gates.sum(dim=2))  # [B, M, heads]
            scaler[:, :v] = 1.0
            out = out * scaler[..., None]
        h = h + layer.out_h(out.flatten(-2))
        h = h + _ffn(layer.ffn_h, h)
        if layer.update_edges:
            e = e + layer.out_e(h_hat)
            e = e + _ffn(layer.ffn_e, e)
    h = model.final_ln_h(h)
    node = h[:, v:] * batch.node_mask[..., None]
    graph = h[:, :v].flatten(1) if v else node.sum(1) / batch.node_mask.sum(1, keepdim=True)
    edge = model.final_ln_e(e)[:, v:, v:] if model.final_ln_e is not None else None
    return node, edge, graph


def dense_graphormer(model, batch):
    """Graphormer with explicit softmax attention and the bias built by the model."""
    cfg = model.cfg
    x = model._nodes(batch)
    bias = model.attention_bias(batch, torch.float32)
    heads, d = cfg.num_heads, cfg.node_width // cfg.num_heads
    for layer in model.layers:
        q, k, v = layer.qkv(layer.ln(x)).split(cfg.node_width, dim=-1)
        q, k, v = (t.unflatten(-1, (heads, d)).transpose(1, 2) for t in (q, k, v))
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1)
        x = x + layer.out((attn @ v).transpose(1, 2).flatten(-2))
        x = x + _ffn(layer.ffn, x)
    x = model.final_ln(x)
    return x[:, 1:] * batch.node_mask[..., None], None, x[:, 0]


EGT_VARIANTS = {
    "egt": TINY_EGT,
    "egt-constrained": {**TINY_EGT, "constrained": True},
    "egt-no-virtual-nodes-ungated": {**TINY_EGT, "num_virtual_nodes": 0, "gated": False, "scale_degree": False},
    "egt-simple": {**TINY_EGT, "simple": True, "output_edges": False},
}


@pytest.mark.parametrize("name", sorted(EGT_VARIANTS))
def test_egt_matches_dense_equations(name, graphs):
    torch.manual_seed(0)
    model = build_model(EGT_VARIANTS[name]).eval()
    batch = make_batch(graphs, pad_to=13)
    with torch.no_grad():
        out = model(batch)
        node, edge, graph = dense_egt(model, batch)
    torch.testing.assert_close(out.node, node, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.graph, graph, atol=1e-5, rtol=1e-5)
    if edge is not None:
        real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
        torch.testing.assert_close(out.edge[real], edge[real], atol=1e-5, rtol=1e-5)


def test_graphormer_matches_dense_equations(graphs):
    torch.manual_seed(0)
    model = build_model(TINY_GRAPHORMER).eval()
    batch = make_batch(graphs, pad_to=13)
    with torch.no_grad():
        out = model(batch)
        node, _, graph = dense_graphormer(model, batch)
    torch.testing.assert_close(out.node, node, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.graph, graph, atol=1e-5, rtol=1e-5)
