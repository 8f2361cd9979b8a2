"""Energy Transformer: the update is the energy's exact gradient, the energy descends, the dense
and sparse forms agree, non-edges get exactly zero gradient, the sparse form allocates no N×N
tensor, and the model trains through the task model of the trainer."""

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from model_fixtures import TINY_ET, TINY_ET_SPARSE, make_batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models import build_model
from gtscale.models.et import anomaly_loss


def _model(cfg: dict, **overrides):
    torch.manual_seed(0)
    return build_model({**cfg, **overrides})


def _dense_state(model, batch):
    """(tokens x⁰ with the CLS first, the DenseGraph) of a dense ET."""
    x = model.embed(batch)
    if model.cls is not None:
        x = torch.cat([model.cls.expand(batch.num_graphs, 1, -1), x], dim=1)
    graph = model.structure(batch, x)
    return graph.mask_tokens(x).detach(), graph


@pytest.mark.parametrize("overrides", [{}, {"self_loops": True}, {"learned_adjacency": False, "cls_token": False}])
def test_dense_update_is_the_energy_gradient(graphs, overrides):
    model = _model(TINY_ET, **overrides)
    batch = make_batch(graphs, pad_to=13)
    with torch.no_grad():
        for p in model.parameters():  # away from the initial values (γ = 1, δ = 0)
            p.add_(0.1 * torch.randn_like(p))
    x, graph = _dense_state(model, batch)
    graph.weight = graph.weight.detach() if graph.weight is not None else None
    g = model.block.norm(x + torch.randn_like(x)).detach().requires_grad_()
    (auto,) = torch.autograd.grad(model.block.energy_of_g(g, graph), g)
    closed = -model.block.descent(g, graph)
    auto = graph.mask_tokens(auto)  # padding tokens are outside the energy
    torch.testing.assert_close(closed, auto, atol=1e-5, rtol=1e-5)
    assert closed.abs().max() > 0.1


@pytest.mark.parametrize("self_loops", [False, True])
def test_sparse_update_is_the_energy_gradient(graphs, self_loops):
    model = _model(TINY_ET_SPARSE, self_loops=self_loops)
    edges = EdgeBatch.from_dense(make_batch(graphs))
    graph = model.structure(edges)
    g = model.block.norm(model.embed(edges)).detach().requires_grad_()
    (auto,) = torch.autograd.grad(model.block.energy_of_g(g, graph), g)
    torch.testing.assert_close(-model.block.descent(g, graph), auto, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cfg", [TINY_ET, {**TINY_ET, "self_loops": True}, TINY_ET_SPARSE], ids=["dense", "dense-loops", "sparse"])
def test_energy_decreases_monotonically(graphs, cfg):
    """Eq. 7's claim for the discretised dynamics: with noise off and a small α, every step lowers E."""
    model = _model(cfg, step_size=0.01, num_steps=30, noise_std=0.5).eval()  # eval: no noise
    batch = make_batch(graphs)
    energies = model.energies(batch if cfg["form"] == "dense" else EdgeBatch.from_dense(batch))
    steps = np.diff(energies)
    assert (steps < 0).all(), energies
    assert energies[-1] < energies[0] - 1.0


def test_noise_acts_only_in_training(graphs):
    batch = make_batch(graphs)
    model = _model(TINY_ET, noise_std=0.3)
    plain = _model(TINY_ET)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(batch).graph, plain.eval()(batch).graph)
        assert not torch.allclose(model.train()(batch).graph, plain(batch).graph)


@pytest.mark.parametrize("self_loops", [False, True])
def test_dense_and_sparse_forms_agree(graphs, self_loops):
    common = {"self_loops": self_loops, "cls_token": False, "learned_adjacency": False, "lap_k": 0}
    dense, sparse = _model(TINY_ET, **common), _model(TINY_ET_SPARSE, **common)
    sparse.load_state_dict(dense.state_dict())
    batch = make_batch(graphs, pad_to=12)
    with torch.no_grad():
        d_out, s_out = dense(batch), sparse(batch)
        e_out = sparse(EdgeBatch.from_dense(batch))
    width = TINY_ET["node_width"]
    torch.testing.assert_close(s_out.node[..., width:], d_out.node, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(e_out.node, s_out.node[batch.node_mask], atol=1e-6, rtol=1e-6)
    assert d_out.node.abs().max() > 0.1


def test_non_edges_get_exactly_zero_weight_and_gradient(graphs):
    model = _model(TINY_ET, self_loops=True)
    batch = make_batch(graphs, pad_to=12)
    x, graph = _dense_state(model, batch)
    weight = graph.weight.detach().requires_grad_()
    graph.weight = weight
    g = model.block.norm(x)
    energy = model.block.energy_of_g(g, graph)
    (grad,) = torch.autograd.grad(energy, weight)
    non_edges = ~graph.allowed[:, None].expand_as(grad)
    assert non_edges.any() and (grad[non_edges] == 0).all()
    assert (grad[~non_edges] != 0).float().mean() > 0.9


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op produces and the two largest dimensions of any output. A
    sparse CSR matrix counts by what it stores (its values), not by its N × N logical shape."""

    def __init__(self):
        super().__init__()
        self.max_numel, self.shapes = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                stored = t.values() if t.layout == torch.sparse_csr else t
                self.max_numel = max(self.max_numel, stored.numel())
                self.shapes.append(tuple(stored.shape))
        return out


def test_sparse_form_allocates_no_n_by_n_tensor():
    """20,000 nodes, 60,000 edges, forward and backward: every tensor stays O(N·D + E·H·Y)."""
    n, e = 20_000, 60_000
    gen = torch.Generator().manual_seed(0)
    batch = EdgeBatch(
        edge_index=torch.randint(0, n, (2, e), generator=gen), graph_index=torch.zeros(n, dtype=torch.long),
        num_graphs=1, node_feat_float=torch.randn(n, 5, generator=gen),
    )
    model = _model(TINY_ET_SPARSE, node_vocab=[], node_float_dim=5, self_loops=True).train()
    with _LargestTensor() as seen:
        out = model(batch)
        (out.node * torch.randn(out.node.shape, generator=gen)).sum().backward()
    assert not any(sum(d >= n for d in shape) >= 2 for shape in seen.shapes)
    bound = 4 * (e + n) * TINY_ET["num_heads"] * TINY_ET["head_dim"]
    assert seen.max_numel <= bound and 50 * bound < n * n  # one N×N tensor would be 78× the bound


def _random_graphs(seed: int, symmetric: bool, graphs: int = 3, nodes: int = 40, edges: int = 60) -> EdgeBatch:
    """`graphs` random graphs of `nodes` nodes and `edges` directed edges each (with their reverses
    when `symmetric`), 5 features, 9 of the nodes the targets (distinct, in no order)."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, nodes, (2, graphs, edges), generator=gen) + torch.arange(graphs)[:, None] * nodes
    src, dst = src.flatten(), dst.flatten()
    if symmetric:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    n = graphs * nodes
    return EdgeBatch(edge_index=torch.stack([src, dst]), graph_index=torch.arange(n) // nodes, num_graphs=graphs,
                     node_feat_float=torch.randn(n, 5, generator=gen), target_rows=torch.randperm(n, generator=gen)[:9])


@pytest.mark.parametrize("num_steps", [1, 2, 3])
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "directed"])
def test_the_targets_alone_score_as_in_the_whole_forward(num_steps, symmetric):
    """Given an EdgeBatch's targets, the sparse ET runs its last steps only where they still reach a
    target (TargetedEdgeGraph); the targets' outputs and every parameter's gradient equal those of
    the forward over every node, read at the targets, with training noise and on directed edges."""
    from gtscale.models.et.sparse import TargetedEdgeGraph

    model = _model(TINY_ET_SPARSE, node_vocab=[], node_float_dim=5, self_loops=True, num_steps=num_steps, noise_std=0.2, step_size=0.5).train()
    with torch.no_grad():
        for p in model.parameters():  # away from the initial values (γ = 1, δ = 0)
            p.add_(0.1 * torch.randn_like(p))
    batch = _random_graphs(num_steps, symmetric)
    steps = model.step_graphs(model.structure(batch), batch.target_rows)
    assert isinstance(steps[-1], TargetedEdgeGraph) and steps[-1].reads.shape[0] < batch.num_nodes
    weight = torch.randn(len(batch.target_rows), model.node_dim)
    outputs = []
    for targets in (batch.target_rows, None):
        torch.manual_seed(1)  # the same noise
        node = model(dataclasses.replace(batch, target_rows=targets)).node
        node = node if targets is not None else node[batch.target_rows]
        outputs.append((node, torch.autograd.grad((node * weight).sum(), list(model.parameters()))))
    (alone, alone_grads), (whole, whole_grads) = outputs
    torch.testing.assert_close(alone, whole, atol=1e-6, rtol=1e-6)
    for name, a, w in zip(dict(model.named_parameters()), alone_grads, whole_grads):  # fp32 sums in other orders
        assert (a - w).abs().max() <= 3e-6 * w.abs().max(), name


def test_a_targeted_step_reads_the_nodes_within_two_hops():
    """One step at A reads its neighbours' keys and, as a key itself, its neighbours' softmaxes over
    their own neighbours: on a symmetric graph, exactly the nodes within two hops of the rows."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    from gtscale.models.et.sparse import TargetedEdgeGraph

    model = _model(TINY_ET_SPARSE, node_vocab=[], node_float_dim=5, self_loops=True)
    batch = _random_graphs(0, symmetric=True, edges=30)
    rows = torch.unique(batch.target_rows)
    src, dst = batch.edge_index.numpy()
    n = batch.num_nodes
    hops = shortest_path(csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)), indices=rows.numpy(), unweighted=True).min(0)
    step = TargetedEdgeGraph(model.structure(batch), rows)
    assert step.reads.tolist() == np.flatnonzero(hops <= 2).tolist() and 0 < (hops > 2).sum()


def test_anomaly_loss_weights_anomalies_by_the_class_ratio():
    scores = torch.tensor([0.3, -1.0, 2.0, 0.5, -0.2])
    labels = torch.tensor([1, 0, 0, 0, 1])
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected = (1.5 * bce(scores[[0, 4]], labels[[0, 4]].float(), reduction="sum") + bce(scores[1:4], labels[1:4].float(), reduction="sum")) / 5
    torch.testing.assert_close(anomaly_loss(scores, labels), expected)


def test_et_trains_through_the_task_model():
    """The shipped wehi-pains-et task config → build_task_model → forward/backward on molecules
    that went through the data pipeline (featurize, structure with Laplacian eigenvectors, collate)."""
    from gtscale.config import from_dict, load_yaml, CONFIG_ROOT
    from gtscale.format import schema
    from gtscale.format.decode import Record
    from gtscale.loader.collate import collate
    from gtscale.prep.featurize import featurize_smiles
    from gtscale.prep.structure import StructureOptions, structure
    from gtscale.train.config import ResolvedConfig, TrainConfig
    from gtscale.train.task_model import build_task_model, loader_keys, task_model_config
    from gtscale.train.tasks import task_loss

    cfg = from_dict(TrainConfig, load_yaml(CONFIG_ROOT / "tasks" / "wehi-pains-et.yaml"))
    model_cfg = task_model_config(cfg)  # no shards here: the model config as the YAML gives it
    torch.manual_seed(0)
    model = build_task_model(ResolvedConfig(cfg, model_cfg, num_targets=1))
    keys, _ = loader_keys(model.backbone, model_cfg)
    assert schema.LAP_PE in keys
    records = []
    for i, smiles in enumerate(["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "[Na+]"]):
        arrays = featurize_smiles(smiles)
        n = arrays[schema.NODE_FEAT].shape[0]
        arrays.update(structure(arrays[schema.EDGE_INDEX], n, StructureOptions(svd_rank=0, lap_k=model_cfg["lap_k"])))
        arrays[schema.Y] = np.array([i % 2], np.float32)
        records.append(Record(key=f"m{i}", shard="test", num_nodes=n, idx=i, arrays=arrays))
    batch = collate(records, keys, rng=np.random.default_rng(0))
    scores, aux = model.train()(batch)
    assert aux == {} and scores.shape == (4, 1)
    task_loss(scores, batch.y, batch.y_mask, cfg.task).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_dense_and_sparse_forms_train_alike(graphs):
    """Gradients of a loss through the T steps agree between the forms (the sparse edge products'
    backward against dense matmuls)."""
    common = {"self_loops": True, "cls_token": False, "learned_adjacency": False, "lap_k": 0}
    dense, sparse = _model(TINY_ET, **common), _model(TINY_ET_SPARSE, **common)
    sparse.load_state_dict(dense.state_dict())
    batch = make_batch(graphs)
    width = TINY_ET["node_width"]
    gen = torch.Generator().manual_seed(0)
    proj = torch.randn(batch.node_mask.shape + (width,), generator=gen)
    (dense(batch).node * proj).sum().backward()
    (sparse(batch).node[..., width:] * proj).sum().backward()
    for (name, a), b in zip(dense.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
