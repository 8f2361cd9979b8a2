"""The sparse ET's forward one step at a time over chunks of nodes, for full-neighbourhood inference
on graphs too large for one forward (gtscale/train/full_inference.py runs it over a store's CSR,
the node states in memory-mapped files). Equal to SparseET.forward on the whole graph
(tests/models/test_et_layerwise.py).

One step x ← x + α(−∂E/∂g) of sparse.py needs, at node A:
  as a query, the softmax over B ∈ N(A) of β q_A·k_B and Σ_B p K_B: A's own row of the CSR;
  as a key, p_CA = exp(β q_C·k_A − lse_C) for C ∈ N(A) (the graph is symmetric), where lse_C, the
  log-normaliser of C's softmax, spans C's whole neighbourhood: a value of C, not of A's row.
So a step is two passes over the rows: the first computes every node's lse, the second the new
states from each row, its neighbours' states and their lse.

Both passes work in the D-dimensional space of g = LN(x) instead of the H × Y one of queries and
keys. With M_h = W^Qᵀ_h W^K_h (D × D), β q_A·k_B = β g_Aᵀ M_h g_B, and the attention update

    Σ_h W^Qᵀ_h Σ_B p_AB K_B + W^Kᵀ_h Σ_C p_CA Q_C = Σ_h M_h Σ_B p_AB g_B + M_hᵀ Σ_C p_CA g_C,

so a pass gathers each neighbour's state (D numbers) once and never its queries and keys
(2·H·Y numbers: 768 against 128 for configs/models/et-tsocial.yaml). The Hopfield term is each
node's own (ETBlock.hopfield). Self-loops (cfg.self_loops) join every row as one more neighbour.
"""

from __future__ import annotations

import torch

from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models.sparse_ops import segment_softmax


class LayerwiseET:
    """A SparseET (eval mode, no noise) as steps over chunks: embed, log_normalisers, step,
    node_output. Tensors are rows of nodes: x_rows [n, D] a chunk's states, x_neighbours [E, D]
    the states of their stored neighbours row after row, counts [n] each row's neighbours."""

    def __init__(self, model):
        self.model, self.block = model, model.block
        self.num_steps, self.width = model.cfg.num_steps, model.cfg.width
        self.self_loops = model.cfg.self_loops
        block = self.block
        self.pair = torch.einsum("hyi,hyj->hij", block.wq, block.wk).float()  # M_h [H, D, D]
        self.beta = block.beta[0].float()

    @property
    def num_heads(self) -> int:
        return self.pair.shape[0]

    def embed(self, features: torch.Tensor) -> torch.Tensor:
        """x⁰ [n, D] of nodes with continuous features [n, F]."""
        n = features.shape[0]
        batch = EdgeBatch(edge_index=features.new_zeros(2, 0, dtype=torch.long), graph_index=torch.zeros(n, dtype=torch.long,
                          device=features.device), num_graphs=1, node_feat_float=features, max_graph_nodes=n)
        return self.model.embed(batch).float()

    def _edges(self, x_rows, x_neighbours, counts):
        """(g of the rows, g of each edge's neighbour, each edge's row): self-loops appended."""
        rows = torch.arange(x_rows.shape[0], device=x_rows.device)
        dst = torch.repeat_interleave(rows, counts)
        if self.self_loops:
            x_neighbours, dst = torch.cat([x_neighbours, x_rows]), torch.cat([dst, rows])
        return self.block.norm(x_rows), self.block.norm(x_neighbours), dst

    def log_normalisers(self, x_rows: torch.Tensor, x_neighbours: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """lse [n, H] of each row's attention softmax (0 for a row without neighbours)."""
        g, g_nbr, dst = self._edges(x_rows, x_neighbours, counts)
        query = self.beta * torch.einsum("ni,hij->nhj", g, self.pair)  # β M_hᵀ g_A: dotted with g_B gives the logit
        scores = (query[dst] * g_nbr[:, None, :]).sum(-1)
        return segment_softmax(scores, dst, x_rows.shape[0])[1]

    def step(self, x_rows: torch.Tensor, x_neighbours: torch.Tensor, counts: torch.Tensor, lse_rows: torch.Tensor,
             lse_neighbours: torch.Tensor) -> torch.Tensor:
        """The rows' states after one step, from their own and their neighbours' lse."""
        g, g_nbr, dst = self._edges(x_rows, x_neighbours, counts)
        if self.self_loops:
            lse_neighbours = torch.cat([lse_neighbours, lse_rows])
        n, heads = x_rows.shape[0], self.num_heads
        query = self.beta * torch.einsum("ni,hij->nhj", g, self.pair)  # A reads B: β g_Aᵀ M_h g_B
        key = self.beta * torch.einsum("hij,nj->nhi", self.pair, g)  # C reads A: β g_Cᵀ M_h g_A
        p_query = torch.exp((query[dst] * g_nbr[:, None, :]).sum(-1) - lse_rows[dst])
        p_key = torch.exp((key[dst] * g_nbr[:, None, :]).sum(-1) - lse_neighbours)
        read = g.new_zeros(n, heads, g.shape[1]).index_add_(0, dst, p_query[:, :, None] * g_nbr[:, None, :])
        collected = g.new_zeros(n, heads, g.shape[1]).index_add_(0, dst, p_key[:, :, None] * g_nbr[:, None, :])
        update = torch.einsum("hij,nhj->ni", self.pair, read) + torch.einsum("hji,nhj->ni", self.pair, collected)
        return x_rows + self.block.step_size * (update + self.block.hopfield(g).float())

    def node_output(self, x_first: torch.Tensor, x_last: torch.Tensor) -> torch.Tensor:
        """The node representation SparseET.forward returns: g at the first step ‖ g at the last."""
        return torch.cat([self.block.norm(x_first), self.block.norm(x_last)], dim=-1)
