"""Full-neighbourhood inference: every node of a graph store scored by a model that reads all of its
neighbours, computed layer by layer, out of core (PyG's and DGL's layer-wise inference).

Sampled evaluation scores each node on a sample of its neighbourhood (a 5 % induced subgraph, or
fan-outs), which costs a forward per batch of targets and shows the model only part of what a
node's neighbours hold. Here each layer (each step of the sparse ET) runs over all nodes in chunks
of rows of the CSR, reading the previous layer's states of every node and writing the next
layer's into a memory-mapped file, so a node's state is computed once per layer for the whole
graph and from all of its neighbours. Memory holds one chunk (about `chunk_edges` neighbours'
states and the temporaries of their attention) plus one score per node; the states of all nodes
live in files in `workdir` (a folder gtscale owns: the run's eval/ or predict's --out), removed
at the end. The model supplies the per-chunk arithmetic (SparseET.layerwise: models/et/
layerwise.py); a model without it (MNA-GT, whose attention spans its whole graph) is refused.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from gtscale.errors import UserError
from gtscale.graphs.store import GraphStore
from gtscale.models.outputs import Outputs

#: Neighbour states per chunk, × heads × width in the attention's temporaries (fp32): at
#: H × D = 384 (configs/models/et-tsocial.yaml) a chunk's largest temporary is 96 MiB.
CHUNK_ELEMENTS = 1 << 25


def layerwise_form(model: torch.nn.Module):
    """The backbone's layer-wise form, or a UserError naming the model."""
    form = getattr(model.backbone, "layerwise", None)
    if form is None:
        raise UserError(f"full-neighbourhood inference covers models that attend along edges one layer at a time (the sparse ET); "
                        f"{type(model.backbone).__name__} does not: score it by sampling (inference: sampled)")
    return form()


def row_chunks(indptr: np.ndarray, edges: int) -> list[tuple[int, int]]:
    """Consecutive row ranges of about `edges` stored entries (and at most `edges` rows) each; a
    row of more entries is a range of its own."""
    n, nnz = len(indptr) - 1, int(indptr[-1])
    cuts = np.searchsorted(indptr, np.arange(0, nnz, edges), side="right") - 1
    cuts = np.unique(np.concatenate([cuts, np.arange(0, n, edges), [n]]).clip(0, n))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


@torch.no_grad()
def full_graph_logits(model: torch.nn.Module, store: GraphStore, workdir: str | Path, chunk_edges: int | None = None,
                      progress: bool = True) -> np.ndarray:
    """float32 [N]: the task head's score of every node of `store` (output 0), each node with all
    of its neighbours. `model`: backbone + head (an export's or the trainer's task model)."""
    form = layerwise_form(model)
    model.eval()
    device = next(model.parameters()).device
    chunk_edges = chunk_edges or max(1, CHUNK_ELEMENTS // (form.num_heads * form.node_width))
    indptr, indices, n = np.asarray(store.indptr), store.indices, store.num_nodes
    chunks = row_chunks(indptr, chunk_edges)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    passes = 2 * form.num_steps + 2
    with tempfile.TemporaryDirectory(dir=workdir, prefix=".node-states-") as tmp, \
            tqdm(total=n * passes, unit="node", unit_scale=True, desc="full-graph inference", disable=not progress) as bar:
        def states(name: str, width: int) -> np.ndarray:
            return np.lib.format.open_memmap(Path(tmp) / f"{name}.npy", "w+", np.float32, (n, width))

        def rows(array: np.ndarray, a: int, b: int) -> torch.Tensor:
            return torch.from_numpy(np.array(array[a:b], np.float32)).to(device)

        def neighbourhood(g: np.ndarray, a: int, b: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
            """(the rows' neighbours, their g row after row, each row's count)"""
            neighbours = np.asarray(indices[indptr[a] : indptr[b]], np.int64)
            counts = torch.from_numpy(np.diff(indptr[a : b + 1])).to(device)
            return neighbours, torch.from_numpy(g[neighbours]).to(device), counts

        x, g = states("x0", form.node_width), states("g0", form.node_width)
        for a, b in chunks:
            x0 = form.embed(rows(store.features, a, b))
            x[a:b], g[a:b] = x0.cpu().numpy(), form.normalise(x0).cpu().numpy()
            bar.update(b - a)
        first, lse = g, states("lse", form.num_heads)
        for step in range(form.num_steps):
            for a, b in chunks:
                _, g_nbr, counts = neighbourhood(g, a, b)
                lse[a:b] = form.log_normalisers(rows(g, a, b), g_nbr, counts).cpu().numpy()
                bar.update(b - a)
            x_next, g_next = states(f"x{step + 1}", form.node_width), states(f"g{step + 1}", form.node_width)
            for a, b in chunks:
                neighbours, g_nbr, counts = neighbourhood(g, a, b)
                lse_nbr = torch.from_numpy(lse[neighbours]).to(device)
                new = form.step(rows(x, a, b), rows(g, a, b), g_nbr, counts, rows(lse, a, b), lse_nbr)
                x_next[a:b], g_next[a:b] = new.cpu().numpy(), form.normalise(new).cpu().numpy()
                bar.update(b - a)
            for done in (x, g) if step else (x,):  # g0 stays: the output reads it
                Path(done.filename).unlink()
            x, g = x_next, g_next
        logits = np.empty(n, np.float32)
        for a, b in chunks:
            node = form.node_output(rows(first, a, b), rows(g, a, b))
            logits[a:b] = model.head(Outputs(node=node, edge=None, graph=None))[:, 0].float().cpu().numpy()
            bar.update(b - a)
        del first, x, g, lse
    return logits


def split_rows(logits: np.ndarray, store: GraphStore, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx, y_pred [K, 1], y_true [K, 1] with NaN where unlabelled) of a split's nodes from every
    node's logit, sorted by node id: the rows a sampled evaluation gathers (tasks.predict)."""
    idx = np.sort(np.asarray(nodes, np.int64))
    labels = np.asarray(store.labels[idx])
    y_true = np.where(labels >= 0, (labels == 1).astype(np.float32), np.nan).astype(np.float32)
    return idx, logits[idx, None], y_true[:, None]
