"""EGT specifics: each ablation switch changes what it should and nothing else, the centrality
scalers, the virtual-node edge rule, the graph readouts and the input encodings."""

import numpy as np
import pytest
import torch

from model_fixtures import SVD_RANK, TINY_EGT, make_batch
from gtscale.format.schema import ATOM_FEATURE_DIMS, SPD_UNREACHABLE
from gtscale.errors import UserError
from gtscale.models import build_model
from gtscale.models.egt import VirtualNodes


def _egt(**overrides):
    torch.manual_seed(0)
    return build_model({**TINY_EGT, **overrides}).eval()


def _path_graph(n: int, x_seed: int = 0) -> dict:
    rng = np.random.default_rng(x_seed)
    src = list(range(n - 1)) + list(range(1, n))
    dst = list(range(1, n)) + list(range(n - 1))
    attr = np.zeros((2 * (n - 1), 3), dtype=np.int64)
    return {
        "node_feat": np.stack([rng.integers(0, d, n) for d in ATOM_FEATURE_DIMS], axis=1),
        "edge_index": np.array([src, dst]),
        "edge_feat": attr,
        "svd_pe": rng.standard_normal((n, 2 * SVD_RANK)).astype(np.float32),
    }


def _layer_outputs(model, batch):
    """(h, e) packed outputs of every layer."""
    seen = []
    hooks = [layer.register_forward_hook(lambda m, args, out: seen.append(out)) for layer in model.layers]
    with torch.no_grad():
        model(batch)
    for hook in hooks:
        hook.remove()
    return seen


def test_simple_never_updates_edges_and_changes_nothing_else(graphs):
    full, simple = _egt(output_edges=False), _egt(output_edges=False, simple=True)
    missing, unexpected = simple.load_state_dict(full.state_dict(), strict=False)
    assert not missing
    assert unexpected and all(".out_e." in k or ".ffn_e." in k for k in unexpected)
    batch = make_batch(graphs)
    full_layers, simple_layers = _layer_outputs(full, batch), _layer_outputs(simple, batch)
    # every layer of EGT-Simple passes the input edge channels through unchanged
    assert all(torch.equal(e, simple_layers[0][1]) for _, e in simple_layers)
    assert not torch.equal(full_layers[0][1], simple_layers[0][1])
    # the first layer's node update is the same; from the second on the edge updates matter
    torch.testing.assert_close(simple_layers[0][0], full_layers[0][0])
    assert not torch.allclose(simple_layers[1][0], full_layers[1][0])
    with torch.no_grad():
        assert simple(batch).edge is None


def test_simple_rejects_an_edge_output():
    with pytest.raises(UserError, match="simple"):
        build_model({**TINY_EGT, "simple": True, "output_edges": True})


@pytest.mark.parametrize("constrained, moved", [(True, {2, 3, 4}), (False, {0, 1, 2, 3, 4})])
def test_constrained_attends_to_one_hop_only(constrained, moved):
    """One layer, no virtual nodes, path 0-1-2-3-4: changing node 3 moves, under EGT-Constrained,
    only nodes within one hop of it (2, 3, 4)."""
    model = _egt(num_layers=1, num_virtual_nodes=0, constrained=constrained)
    g = _path_graph(5)
    changed = {**g, "node_feat": g["node_feat"].copy()}
    changed["node_feat"][3, 0] = (changed["node_feat"][3, 0] + 1) % ATOM_FEATURE_DIMS[0]
    with torch.no_grad():
        before, after = model(make_batch([g])).node[0], model(make_batch([changed])).node[0]
    differs = {i for i in range(5) if not torch.allclose(before[i], after[i], atol=1e-6)}
    assert differs == moved


def test_constrained_has_the_same_parameters():
    plain, constrained = _egt(), _egt(constrained=True)
    assert plain.state_dict().keys() == constrained.state_dict().keys()


def test_ungated_equals_gated_with_saturated_gates(graphs):
    gated, ungated = _egt(scale_degree=False), _egt(gated=False, scale_degree=False)
    heads = TINY_EGT["num_heads"]
    with torch.no_grad():
        for layer in gated.layers:
            layer.edge_in.weight[heads:] = 0
            layer.edge_in.bias[heads:] = 50.0  # σ(50) == 1.0 in fp32
    state = gated.state_dict()
    for i in range(len(gated.layers)):
        state[f"layers.{i}.edge_in.weight"] = state[f"layers.{i}.edge_in.weight"][:heads]
        state[f"layers.{i}.edge_in.bias"] = state[f"layers.{i}.edge_in.bias"][:heads]
        assert ungated.layers[i].edge_in.out_features == heads
    ungated.load_state_dict(state)
    batch = make_batch(graphs)
    with torch.no_grad():
        torch.testing.assert_close(ungated(batch).graph, gated(batch).graph)
        layer = gated.layers[0]
        layer.edge_in.bias[heads:] = 0.0
        assert not torch.allclose(ungated(batch).graph, gated(batch).graph)


def test_scale_degree_needs_gates():
    with pytest.raises(UserError, match="scale_degree"):
        build_model({**TINY_EGT, "gated": False})


def test_centrality_scalers(graphs):
    """With constant gates σ(c), V̂ is scaled by ln(1 + Σ_j σ(c)) over the real tokens j of the
    graph, and by exactly 1 on the virtual nodes."""
    model = _egt(num_layers=1)
    layer, heads, c = model.layers[0], TINY_EGT["num_heads"], 0.3
    with torch.no_grad():
        layer.edge_in.weight[heads:] = 0
        layer.edge_in.bias[heads:] = c
        batch = make_batch(graphs)
        h, e = model._inputs(batch)
        ctx = model._context(batch, torch.float32)
        h, e = ctx.packing.pack_tokens(h), ctx.packing.pack_pairs(e)
        scaled, _ = layer.attention(h, e, ctx)
        layer.scale_degree = False
        plain, _ = layer.attention(h, e, ctx)
    v = TINY_EGT["num_virtual_nodes"]
    expected = torch.ones(len(graphs), ctx.packing.size)  # [B, M], virtual nodes first
    for k, g in enumerate(graphs):
        n = g["node_feat"].shape[0]
        expected[k, v:v + n] = float(np.log1p((v + n) / (1 + np.exp(-c))))
    unpack = ctx.packing.unpack_tokens
    torch.testing.assert_close(unpack(scaled), unpack(plain) * expected[..., None], atol=1e-5, rtol=1e-5)


def test_virtual_edge_rule():
    torch.manual_seed(0)
    vn = VirtualNodes(3, 4, 2)
    h, e = torch.randn(2, 5, 4), torch.randn(2, 5, 5, 2)
    h2, e2 = vn(h, e)
    assert h2.shape == (2, 8, 4) and e2.shape == (2, 8, 8, 2)
    torch.testing.assert_close(h2[:, :3], vn.node.expand(2, 3, 4))
    torch.testing.assert_close(e2[:, 3:, 3:], e)
    for i in range(3):
        torch.testing.assert_close(e2[:, i, 3:], vn.edge[i].expand(2, 5, 2))  # virtual → graph node
        torch.testing.assert_close(e2[:, 3:, i], vn.edge[i].expand(2, 5, 2))  # graph node → virtual
        for j in range(3):
            torch.testing.assert_close(e2[:, i, j], (0.5 * (vn.edge[i] + vn.edge[j])).expand(2, 2))


def test_graph_readouts(graphs):
    batch = make_batch(graphs)
    with torch.no_grad():
        out = _egt()(batch)
        pooled = _egt(num_virtual_nodes=0)(batch)
    assert out.graph.shape == (len(graphs), TINY_EGT["node_width"] * TINY_EGT["num_virtual_nodes"])
    mean = pooled.node.sum(dim=1) / batch.node_mask.sum(dim=1, keepdim=True)
    torch.testing.assert_close(pooled.graph, mean)


def test_output_edges_switch(graphs):
    with_edges, without = _egt(), _egt(output_edges=False)
    assert with_edges.layers[-1].update_edges and not without.layers[-1].update_edges
    assert with_edges.edge_dim == TINY_EGT["edge_width"] and without.edge_dim == 0
    with torch.no_grad():
        assert without(make_batch(graphs)).edge is None
        assert with_edges(make_batch(graphs)).edge.shape[-1] == TINY_EGT["edge_width"]


def test_hops_beyond_k_share_the_unreachable_embedding(graphs):
    model = _egt()
    batch = make_batch(graphs)
    k = TINY_EGT["upto_hop"]
    far = batch.spd > k
    assert far.any() and (batch.spd == SPD_UNREACHABLE).any()
    moved = make_batch(graphs)
    moved.spd[far] = k + 1
    closer = make_batch(graphs)
    closer.spd[far] = k
    with torch.no_grad():
        torch.testing.assert_close(model(moved).graph, model(batch).graph)
        assert not torch.allclose(model(closer).graph, model(batch).graph)


def test_svd_encoding_uses_the_top_rank_of_each_half(graphs):
    model = _egt(svd_rank=2)  # the batch holds rank SVD_RANK = 4: U√Σ in 0..3, V√Σ in 4..7
    batch = make_batch(graphs)
    with torch.no_grad():
        base = model(batch).graph
        unused = make_batch(graphs)
        unused.svd_pe[..., [2, 3, 6, 7]] += 1.0
        torch.testing.assert_close(model(unused).graph, base)
        used = make_batch(graphs)
        used.svd_pe[..., 5] += 1.0
        assert not torch.allclose(model(used).graph, base)


def test_continuous_features_on_an_ego_batch_train_a_node_head_on_the_target(ego_shards):
    """EGT with node_float_dim: a linear embedding of node_feat_float, edge_vocab [1] ("an edge");
    forward/backward through a node head read at each target node, padding nodes inert."""
    from gtscale.format import schema
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.models import build_head
    from gtscale.models.embeddings import ContinuousEmbedding
    from gtscale.train.distributed_eval import target_predictions
    from gtscale.train.node_metrics import node_bce

    store, shards = ego_shards
    config = LoaderConfig(node_budget=256, bucketing=False, num_workers=0, keys=[schema.SPD, schema.SVD_PE, schema.TARGET_Y])
    batch = next(iter(build_loader(shards, "val", config, train=False, rank=0, world_size=1)))
    assert not batch.node_mask.all(), "the batch has padding nodes"
    model = _egt(node_float_dim=batch.node_feat_float.shape[-1], edge_vocab=[1], output_edges=False).train()
    assert isinstance(model.node_embed, ContinuousEmbedding) and "node_feat_float" in model.batch_fields
    head = build_head({"kind": "node", "num_outputs": 1}, model)
    _, logits = target_predictions(batch, head(model(batch))[..., 0])
    loss = node_bce(logits, batch.target_y.reshape(-1), batch.target_y_mask.reshape(-1), pos_weight=9.0)
    loss.backward()
    assert torch.isfinite(loss) and model.node_embed.linear.weight.grad.abs().sum() > 0
    assert model.edge_embed.table.weight.grad[1].abs().sum() > 0, "the edge row is used"

    model.eval()
    noisy = batch.node_feat_float.clone()
    noisy[~batch.node_mask] = 100.0
    with torch.no_grad():
        plain = target_predictions(batch, head(model(batch))[..., 0])[1]
        batch.node_feat_float = noisy
        assert torch.equal(target_predictions(batch, head(model(batch))[..., 0])[1], plain), "padding nodes are inert"
    with pytest.raises(ValueError, match="no node_feat_float"):
        batch.node_feat_float = None
        model(batch)
