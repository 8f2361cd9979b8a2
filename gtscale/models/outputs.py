"""What every model returns: embeddings for nodes, node pairs and whole graphs; heads read these."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class Outputs(NamedTuple):
    """Model outputs in the Batch's dense layout. Rows of padding nodes (and pairs involving
    one) are zero; virtual nodes / graph tokens are not among the node rows.

    A NamedTuple, not a dataclass, because ZeRO-3 must see the tensors a module returns: it hooks
    them to gather the module's own parameters again for the backward pass, and it looks inside
    tuples, lists and dicts only. Behind a dataclass the parameters a backbone holds directly
    (Graphormer's graph token, the ET's CLS token and pair weights) stayed partitioned in backward,
    and training under ZeRO-3 failed with a size-0 tensor."""

    node: torch.Tensor  # float [B, N, d]; an EdgeBatch's [N_tot, d], or [K, d] at its target_rows when it has one
    edge: Optional[torch.Tensor]  # float [B, N, N, d_e]; None for models without an edge output
    graph: Optional[torch.Tensor]  # float [B, d_g]; None where a model computed only an EdgeBatch's targets (the sparse ET)
