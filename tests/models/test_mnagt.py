"""MNA-GT: the sparse propagation equals the dense normalised adjacency, allocates no N×N tensor,
the first residual is ÂX, Batch and EdgeBatch inputs agree, and it trains through the task model."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from model_fixtures import TINY_MNAGT, make_batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models import build_model


def _model(**overrides):
    torch.manual_seed(0)
    return build_model({**TINY_MNAGT, **overrides})


def _dense_adjacency(batch, normalization: str) -> torch.Tensor:
    """Â per graph, [B, N, N], from the dense Batch: (A+I) normalised; Â[v, u] weights edge u → v."""
    mask = batch.node_mask
    a = ((batch.edge_feat != 0).any(-1) & mask[:, :, None] & mask[:, None, :]).float().transpose(1, 2)
    a = a + torch.diag_embed(mask.float())
    deg = a.sum(-1)
    if normalization == "sym":
        inv = torch.where(deg > 0, deg.rsqrt(), 0.0)
        return inv[:, :, None] * a * inv[:, None, :]
    return a / deg.clamp(min=1)[:, :, None]


@pytest.mark.parametrize("normalization", ["sym", "rw"])
def test_sparse_propagation_equals_the_dense_normalised_adjacency(graphs, normalization):
    model = _model(normalization=normalization)
    batch = make_batch(graphs, pad_to=12)
    edges = EdgeBatch.from_dense(batch)
    prop = model._propagation(edges)
    x = torch.randn(edges.num_nodes, 5)
    dense = _dense_adjacency(batch, normalization) @ edges.to_dense_nodes(x, batch.node_mask)
    x2 = prop(prop(x))
    dense2 = _dense_adjacency(batch, normalization) @ dense
    torch.testing.assert_close(prop(x), dense[batch.node_mask], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(x2, dense2[batch.node_mask], atol=1e-6, rtol=1e-5)


class _Shapes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:  # Â itself is sparse CSR, [N, N] with E entries
                self.shapes.append(tuple(t.shape))
        return out


def test_propagation_of_a_large_graph_allocates_no_n_by_n_tensor():
    n, e = 20_000, 100_000
    gen = torch.Generator().manual_seed(0)
    edges = EdgeBatch(edge_index=torch.randint(0, n, (2, e), generator=gen), graph_index=torch.zeros(n, dtype=torch.long),
                      num_graphs=1, node_feat_float=torch.zeros(n, 1))
    x = torch.randn(n, 16, generator=gen, requires_grad=True)
    with _Shapes() as seen:
        prop = _model()._propagation(edges)
        y = prop(prop(prop(x)))
        y.square().sum().backward()
    assert not any(sum(d >= n for d in s) >= 2 for s in seen.shapes)
    assert max(np.prod(s) for s in seen.shapes) <= (e + n) * 16
    assert prop.weight.shape == (e + n,)  # Â held as one weight per edge (self-loops included)


def test_first_residual_is_the_propagated_input(graphs):
    """With every kernel's output projection zero, a layer is LN₂(h + FFN(h)), h = LN₁(ÂX)."""
    model = _model().eval()
    layer = model.layers[0]
    with torch.no_grad():
        for out in layer.out:
            out.weight.zero_()
            out.bias.zero_()
    edges = EdgeBatch.from_dense(make_batch(graphs))
    prop = model._propagation(edges)
    x = torch.randn(edges.num_nodes, TINY_MNAGT["node_width"])
    with torch.no_grad():
        h = layer.ln1(prop(x))
        expected = layer.ln2(h + layer.ffn2(torch.nn.functional.gelu(layer.ffn1(h))))
        torch.testing.assert_close(layer(x, prop), expected)


def test_adaptive_weights_are_a_softmax_over_kernels(graphs):
    layer = _model().layers[0]
    z = [torch.randn(7, TINY_MNAGT["node_width"]) for _ in range(TINY_MNAGT["num_kernels"])]
    combined = layer.combine(z)
    # the combination lies in the convex hull: a weighted mean with weights in (0, 1) summing to 1
    scores = torch.cat([layer.score_vector(torch.tanh(layer.score(t))) for t in z], dim=1)
    alpha = torch.softmax(scores, dim=1)
    torch.testing.assert_close(combined, sum(alpha[:, k:k + 1] * z[k] for k in range(len(z))))
    assert not torch.allclose(combined, torch.stack(z).mean(0))


@pytest.mark.parametrize("readout", ["mean", "sum", "virtual"])
def test_batch_and_edge_batch_inputs_agree(graphs, readout):
    model = _model(readout=readout).eval()
    batch = make_batch(graphs, pad_to=12)
    with torch.no_grad():
        dense, sparse = model(batch), model(EdgeBatch.from_dense(batch))
    torch.testing.assert_close(sparse.node, dense.node[batch.node_mask])
    torch.testing.assert_close(sparse.graph, dense.graph)


def test_mnagt_trains_through_the_task_model(graphs):
    from gtscale.config import CONFIG_ROOT, from_dict, load_yaml
    from gtscale.train.config import ResolvedConfig, TrainConfig
    from gtscale.train.task_model import build_task_model, task_model_config
    from gtscale.train.tasks import task_loss

    cfg = from_dict(TrainConfig, load_yaml(CONFIG_ROOT / "tasks" / "nci-tpsa-mnagt.yaml"))
    torch.manual_seed(0)
    model = build_task_model(ResolvedConfig(cfg, task_model_config(cfg), num_targets=1))  # no shards here
    batch = make_batch(graphs)
    y = torch.randn(batch.num_graphs, 1)
    scores, _ = model.train()(batch)
    task_loss(scores, y, torch.ones_like(y, dtype=torch.bool), cfg.task).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
