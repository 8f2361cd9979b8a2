"""The sparse ET's forward one step at a time over chunks of nodes, for full-neighbourhood inference
on graphs too large for one forward (gtscale/train/full_inference.py runs it over a store's CSR,
the node states in memory-mapped files). Equal to SparseET.forward on the whole graph
(tests/train/test_full_inference.py).

One step x ← x + α(−∂E/∂g) of sparse.py needs, at node A:
  as a query, the softmax over B ∈ N(A) of β q_A·k_B and Σ_B p K_B: A's own row of the CSR;
  as a key, p_CA = exp(β q_C·k_A − lse_C) for C ∈ N(A) (the graph is symmetric), where lse_C, the
  log-normaliser of C's softmax, spans C's whole neighbourhood: a value of C, not of A's row.
So a step is two passes over the rows: the first computes every node's lse, the second the new
states from each row, its neighbours' g = LN(x) and their lse.

Both passes work in the D-dimensional space of g instead of the H × Y one of queries and keys.
With M_h = W^Qᵀ_h W^K_h (D × D), β q_A·k_B = β g_Aᵀ M_h g_B, and the attention update

    Σ_h W^Qᵀ_h Σ_B p_AB K_B + W^Kᵀ_h Σ_C p_CA Q_C = Σ_h M_h Σ_B p_AB g_B + M_hᵀ Σ_C p_CA g_C,

so a pass reads each neighbour's g (D numbers) once and never its queries and keys (2·H·Y
numbers: 768 against 128 for configs/models/et-tsocial.yaml). A chunk's edges, grouped by row,
are a sparse CSR matrix [rows × edges]: the logits are a sampled dense-dense product (SDDMM) and
the sums a sparse-dense one (SpMM), torch's sparse kernels, ten times faster on a CPU than
gathering an [E, H, D] tensor. The Hopfield term is each node's own (ETBlock.hopfield); self-loops
(cfg.self_loops) join every row as one more neighbour.
"""

from __future__ import annotations

import warnings

import torch

from gtscale.loader.edge_batch import EdgeBatch
from gtscale.models.sparse_ops import segment_softmax


class RowEdges:
    """A chunk's edges as a CSR pattern: row r's entries are its `counts[r]` neighbours (columns
    0.. of the neighbour rows, in order) and, with self-loops, the row itself (column E + r)."""

    def __init__(self, counts: torch.Tensor, self_loops: bool):
        n, device = counts.shape[0], counts.device
        per_row = counts + int(self_loops)
        self.crow = torch.zeros(n + 1, dtype=torch.long, device=device)
        torch.cumsum(per_row, 0, out=self.crow[1:])
        self.dst = torch.repeat_interleave(torch.arange(n, device=device), per_row)  # each entry's row
        total, edges = int(self.crow[-1]), int(counts.sum())
        self.col = torch.empty(total, dtype=torch.long, device=device)
        if self_loops:
            own = self.crow[1:] - 1
            neighbour = torch.ones(total, dtype=torch.bool, device=device)
            neighbour[own] = False
            self.col[neighbour] = torch.arange(edges, device=device)
            self.col[own] = edges + torch.arange(n, device=device)
        else:
            self.col = torch.arange(edges, device=device)
        self.shape = (n, edges + (n if self_loops else 0))

    def matrix(self, values: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():  # torch calls its sparse CSR support beta
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(self.crow, self.col, values, self.shape, check_invariants=False)

    def dots(self, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """[entries, H]: rows[r, h] · columns[c] for each entry (r, c): rows [n, H, D], columns [C, D]."""
        pattern = self.matrix(rows.new_zeros(self.col.shape[0]))
        out = [torch.sparse.sampled_addmm(pattern, rows[:, h].contiguous(), columns.t(), beta=0.0).values() for h in range(rows.shape[1])]
        return torch.stack(out, dim=1)

    def sums(self, weights: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """[n, H, D]: Σ over each row's entries of weights[e, h] · columns[c]."""
        return torch.stack([torch.sparse.mm(self.matrix(weights[:, h].contiguous()), columns) for h in range(weights.shape[1])], dim=1)


class LayerwiseET:
    """A SparseET (eval mode, no noise) as steps over chunks: embed, normalise, log_normalisers,
    step, node_output. Tensors are rows of nodes: x_rows / g_rows [n, D] a chunk's states and their
    LN, g_neighbours [E, D] the g of their stored neighbours row after row, counts [n] each row's
    neighbours."""

    def __init__(self, model):
        self.model, self.block = model, model.block
        self.num_steps, self.node_width = model.cfg.num_steps, model.cfg.node_width
        self.self_loops = model.cfg.self_loops
        block = self.block
        self.pair = block.pairs().float()  # M_h [H, D, D]
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

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """g = LN(x), what the neighbours read (eq. 2)."""
        return self.block.norm(x).float()

    def _columns(self, g_rows: torch.Tensor, g_neighbours: torch.Tensor) -> torch.Tensor:
        return torch.cat([g_neighbours, g_rows]) if self.self_loops else g_neighbours

    def log_normalisers(self, g_rows: torch.Tensor, g_neighbours: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """lse [n, H] of each row's attention softmax (0 for a row without neighbours)."""
        edges = RowEdges(counts, self.self_loops)
        query = self.beta * torch.einsum("ni,hij->nhj", g_rows, self.pair)  # β M_hᵀ g_A: dotted with g_B gives the logit
        scores = edges.dots(query, self._columns(g_rows, g_neighbours))
        return segment_softmax(scores, edges.dst, g_rows.shape[0])[1]

    def step(self, x_rows: torch.Tensor, g_rows: torch.Tensor, g_neighbours: torch.Tensor, counts: torch.Tensor, lse_rows: torch.Tensor,
             lse_neighbours: torch.Tensor) -> torch.Tensor:
        """The rows' states after one step, from their own and their neighbours' lse."""
        edges = RowEdges(counts, self.self_loops)
        columns = self._columns(g_rows, g_neighbours)
        lse_columns = torch.cat([lse_neighbours, lse_rows]) if self.self_loops else lse_neighbours
        query = self.beta * torch.einsum("ni,hij->nhj", g_rows, self.pair)  # A reads B: β g_Aᵀ M_h g_B
        key = self.beta * torch.einsum("hij,nj->nhi", self.pair, g_rows)  # C reads A: β g_Cᵀ M_h g_A
        p_query = torch.exp(edges.dots(query, columns) - lse_rows[edges.dst])
        p_key = torch.exp(edges.dots(key, columns) - lse_columns[edges.col])
        read, collected = edges.sums(p_query, columns), edges.sums(p_key, columns)
        update = torch.einsum("hij,nhj->ni", self.pair, read) + torch.einsum("hji,nhj->ni", self.pair, collected)
        return x_rows + self.block.step_size * (update + self.block.hopfield(g_rows).float())

    def node_output(self, g_first: torch.Tensor, g_last: torch.Tensor) -> torch.Tensor:
        """The node representation SparseET.forward returns: g at the first step ‖ g at the last."""
        return torch.cat([g_first, g_last], dim=-1)
