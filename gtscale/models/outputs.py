"""What every model returns: embeddings for nodes, node pairs and whole graphs; heads read these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Outputs:
    """Model outputs in the Batch's dense layout. Rows of padding nodes (and pairs involving
    one) are zero; virtual nodes / graph tokens are not among the node rows."""

    node: torch.Tensor  # float [B, N, d]
    edge: Optional[torch.Tensor]  # float [B, N, N, d_e]; None for models without an edge output
    graph: torch.Tensor  # float [B, d_g]
