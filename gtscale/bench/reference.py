"""Plain implementations, written the obvious way, that `gtscale bench model` times side by side
with the models (same parameters, same outputs up to rounding):

- ET: the energy written directly (masked logsumexp for the dense form; gather + scatter over the
  edge list for the sparse form, which keeps the [E, H, Y] gathers) and each step's update taken
  by autograd, torch.autograd.grad(E, g, create_graph=True), so training needs a double backward;
- MNA-GT: Âᵏ X as a dense product with the per-graph normalised adjacency [B, M, M].
"""

from __future__ import annotations

import torch
from torch import nn

from gtscale.models.et.dense import DenseET, DenseGraph
from gtscale.models.et.sparse import EdgeGraph, SparseET
from gtscale.models.mnagt import MNAGT, Propagation


class _PlainDenseEnergy:
    def __init__(self, graph: DenseGraph):
        self.graph = graph
        self.mask_tokens = graph.mask_tokens

    def attention(self, q, k, beta, energy: bool):
        s = torch.einsum("bchy,bkhy->bhck", q, k).float()
        if self.graph.weight is not None:
            s = s * self.graph.weight.float()
        s = (s * beta).masked_fill(~self.graph.allowed[:, None], float("-inf"))
        has_keys = self.graph.allowed.any(-1)[:, None]
        lse = torch.logsumexp(torch.where(has_keys[..., None], s, 0.0), dim=-1)
        return None, None, -torch.where(has_keys, lse, 0.0).sum() / beta


class _PlainEdgeEnergy:
    def __init__(self, graph: EdgeGraph):
        self.graph = graph
        self.mask_tokens = graph.mask_tokens

    def attention(self, q, k, beta, energy: bool):
        src, dst, n = self.graph.src, self.graph.dst, self.graph.num_nodes
        s = (q[dst] * k[src]).sum(-1).float() * beta  # [E, H], through an [E, H, Y] gather
        idx = dst[:, None].expand_as(s)
        peak = torch.full((n, s.shape[1]), float("-inf"), device=s.device).scatter_reduce(0, idx, s.detach(), "amax")
        peak = torch.where(torch.isfinite(peak), peak, 0.0)
        z = torch.zeros(n, s.shape[1], device=s.device).index_add(0, dst, torch.exp(s - peak[dst]))
        has = z > 0
        lse = torch.where(has, torch.log(torch.where(has, z, 1.0)) + peak, 0.0)
        return None, None, -lse.sum() / beta


class _AutogradDescent(nn.Module):
    """An ET step whose update is autograd's gradient of the plainly written energy."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.inner = block
        self.norm = block.norm

    def forward(self, x: torch.Tensor, graph) -> torch.Tensor:
        plain = _PlainDenseEnergy(graph) if isinstance(graph, DenseGraph) else _PlainEdgeEnergy(graph)
        with torch.enable_grad():
            g = self.norm(x)
            if not g.requires_grad:
                g = g.detach().requires_grad_()
            (grad,) = torch.autograd.grad(self.inner.energy_of_g(g, plain), g, create_graph=self.training)
        return x - self.inner.step_size * grad


class _DenseAdjacency(Propagation):
    """Âᵏ X as a dense [B, M, M] product per graph."""

    def __init__(self, prop: Propagation):
        self.__dict__.update(prop.__dict__)
        n = prop.num_nodes
        graph, slot = prop.graph[:n], prop.slot[:n]
        self.dense = torch.zeros(prop.num_graphs, prop.real.shape[1], prop.real.shape[1], device=slot.device)
        self.dense[graph[prop.dst], slot[prop.dst], slot[prop.src]] = prop.weight
        self.node_graph, self.node_slot = graph, slot

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = self.num_nodes
        padded = x.new_zeros(self.num_graphs, self.dense.shape[1], x.shape[-1])
        padded[self.node_graph, self.node_slot] = x[:n]
        out = torch.bmm(self.dense.to(x.dtype), padded)[self.node_graph, self.node_slot]
        return torch.cat([out, x[n:]]) if self.num_rows > n else out


class _PlainMNAGT(MNAGT):
    def _propagation(self, batch):
        return _DenseAdjacency(super()._propagation(batch))


def plain_version(model: nn.Module) -> nn.Module:
    """The plain implementation of `model`, sharing its parameters; ValueError for other models."""
    if isinstance(model, (DenseET, SparseET)):
        model.block = _AutogradDescent(model.block)
        return model
    if isinstance(model, MNAGT):
        model.__class__ = _PlainMNAGT
        return model
    raise ValueError(f"no plain reference implementation for {type(model).__name__}")
