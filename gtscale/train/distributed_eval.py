"""Evaluation across ranks: equal forward-pass counts, and predictions gathered by source idx.

An evaluation loader yields each sample exactly once across all ranks, so ranks end up with
different batch counts. That is harmless for plain data parallelism, but under ZeRO-3 every
forward pass all-gathers parameters, and a rank that stops early leaves the others waiting.
`lockstep` keeps every rank going until all are done, feeding filler batches (idx −1, no labels)
to the ones that ran out, at the price of one one-element all-reduce per step; the same flag lets
all ranks abandon the evaluation together when a stop request killed a rank's loader workers.

`gather_predictions` then collects every rank's (idx, prediction) rows, drops the filler rows,
checks that no idx arrived twice, and returns them sorted by idx — the order an OGB Evaluator
compares against the dataset's labels. For node tasks on sampled subgraphs the key is the target's
**global node id** instead: `target_predictions` turns a batch's per-node outputs into (target_id,
value) rows, which gather_predictions collects the same way (padding targets and filler graphs carry
id FILLER_IDX and are dropped; a node evaluated twice raises).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

import torch
import torch.distributed as dist

from gtscale.loader.batch import Batch
from gtscale.loader.batch import FILLER_IDX
from gtscale.train.stop_signals import LOADER_FAILURES


class EvaluationStopped(Exception):
    """Raised by `lockstep` on every rank when one rank's loader failed under a stop request."""


_DONE, _MORE, _STOPPED = 0, 1, 2  # one rank's state; the all-reduce takes the maximum


def lockstep(batches: Iterable[Batch], filler: Batch, group=None, device: torch.device | str = "cpu",
             stop_on_failure: Callable[[], bool] | None = None) -> Iterator[Batch]:
    """This rank's batches, then `filler` until every rank in `group` has run out.

    `device` is where the all-reduce flag lives (the engine's device: a CUDA device under NCCL).
    When fetching fails with one of LOADER_FAILURES (DataLoader workers killed by the SIGTERM that stops the
    job) and `stop_on_failure()` says a stop was requested, every rank raises EvaluationStopped at
    the same batch instead of one rank leaving the others in a collective."""
    local = iter(batches)
    while True:
        state = _MORE
        try:
            batch = next(local, None)
        except LOADER_FAILURES:
            if stop_on_failure is None or not stop_on_failure():
                raise
            batch, state = None, _STOPPED
        if batch is None and state != _STOPPED:
            state = _DONE
        flag = torch.tensor([state], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        agreed = flag.item()
        if agreed == _STOPPED:
            raise EvaluationStopped("a rank's evaluation loader stopped under a stop request")
        if agreed == _DONE:
            return
        yield batch if batch is not None else filler


def target_predictions(batch: Batch, node_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target_id [B·T], node_values at each target node [B·T, ...]) of a node-task batch.

    `node_values` is per node, [B, N, ...] (a node head's output); rows of padding targets and of
    filler graphs have id FILLER_IDX, which gather_predictions drops."""
    if batch.target_pos is None or batch.target_id is None:
        raise ValueError("a node-task batch needs target_pos and target_id (loader key 'target_y')")
    graphs = torch.arange(batch.num_graphs, device=node_values.device)[:, None].expand_as(batch.target_pos)
    values = node_values[graphs, batch.target_pos.to(node_values.device)]
    return batch.target_id.reshape(-1), values.reshape(-1, *values.shape[2:])


def gather_predictions(idx: Sequence[torch.Tensor], values: Sequence[torch.Tensor], group=None, expected: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """All ranks' (idx [n], values [n, ...]) rows, filler rows dropped, sorted by idx; on every rank.

    idx is Batch.idx (graph tasks) or the global node ids of `target_predictions` (node tasks).

    `idx`/`values` are this rank's per-batch tensors (any device). With `expected`, the total must
    be exactly that many samples. Raises RuntimeError when an idx arrived twice."""
    local = (
        torch.cat([i.detach().cpu().long() for i in idx]) if len(idx) else None,
        torch.cat([v.detach().cpu() for v in values]) if len(values) else None,
    )
    parts: list = [local]
    if dist.is_available() and dist.is_initialized():
        parts = [None] * dist.get_world_size(group)
        dist.all_gather_object(parts, local, group=group)
    parts = [p for p in parts if p[0] is not None]
    if not parts:
        all_idx, all_values = torch.zeros(0, dtype=torch.long), torch.zeros(0)
    else:
        all_idx, all_values = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    keep = all_idx != FILLER_IDX
    order = torch.argsort(all_idx[keep], stable=True)
    all_idx, all_values = all_idx[keep][order], all_values[keep][order]
    repeated = all_idx[1:] == all_idx[:-1]
    if bool(repeated.any()):
        raise RuntimeError(f"sample idx {int(all_idx[1:][repeated][0])} was evaluated more than once")
    if expected is not None and all_idx.numel() != expected:
        raise RuntimeError(f"evaluated {all_idx.numel()} samples, expected {expected}")
    return all_idx, all_values
