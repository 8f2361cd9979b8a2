"""Input pieces shared by the models: categorical feature columns through one flat embedding
table, continuous node features through a linear map, and the additive value that masks an
attention pair."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.models.linear import Linear

#: Added to the attention logit of a pair that must not attend (padding keys, non-neighbours of
#: EGT-Constrained). Finite so that a row with every key masked (a padding query) softmaxes to a
#: uniform row instead of NaN, and small enough to stay finite when two masks add up in fp16/bf16;
#: exp(-1e4) is exactly 0 in every float format, so masked keys get exactly zero weight.
MASK_VALUE = -1e4


class FeatureEmbedding(nn.Module):
    """Sum over feature columns of each column's embedding, gathered from one flat table.

    The offset convention, defined here only: a Batch holds column c's value shifted by
    schema.FEATURE_SHIFT, v ∈ 1..V_c, with 0 = padding / no edge. The table has 1 + ΣV_c rows.
    Row 0 is the padding row (kept at zero, never trained); column c owns rows O_c+1 .. O_c+V_c,
    O_c = V_0 + … + V_(c-1). With V_c = 128 for the 9 atom columns this is the EGT authors' table
    (9·128+1 rows), with 512 it is Graphormer's (num_atoms = 9·512, plus the padding row): a
    vocabulary larger than the data's only adds unused rows, which is how the paper sizes keep the
    published parameter counts. A value above V_c would land in column c+1's rows; the data
    pipeline guarantees v ≤ V_c.
    """

    def __init__(self, vocab: list[int], dim: int):
        super().__init__()
        self.vocab = list(vocab)
        offsets = torch.tensor([0] + self.vocab[:-1]).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)
        self.table = nn.Embedding(1 + sum(self.vocab), dim, padding_idx=0)

    def rows(self, feat: torch.Tensor) -> torch.Tensor:
        """long [..., F] shifted features → long [..., F] rows of the flat table."""
        if feat.shape[-1] != len(self.vocab):
            raise ValueError(f"expected {len(self.vocab)} feature columns, got {feat.shape[-1]}")
        return torch.where(feat > 0, feat + self.offsets, 0)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        """long [..., F] → float [..., dim]; all-padding rows give zeros.

        embedding_bag sums the columns without materialising the [..., F, dim] gather."""
        rows = self.rows(feat).reshape(-1, feat.shape[-1])
        out = F.embedding_bag(rows, self.table.weight, mode="sum", padding_idx=0)
        return out.view(*feat.shape[:-1], -1)


def lookup(table: nn.Embedding, index: torch.Tensor) -> torch.Tensor:
    """table(index), through embedding_bag with one row per bag: the same values, and a backward
    that stays aten's dense accumulation under torch.compile, where inductor generates an atomic
    scatter for nn.Embedding's (EGT's hop embedding on a CPU: 20 ms of a 350 ms compiled egt-small
    step, against ~1 ms). The padding row (padding_idx) gives zeros and gets no gradient, which is
    nn.Embedding's function as long as that row is zero, as nn.Embedding initialises and keeps it."""
    rows = F.embedding_bag(index.reshape(-1, 1), table.weight, mode="sum", padding_idx=table.padding_idx)
    return rows.view(*index.shape, -1)


class ContinuousEmbedding(nn.Module):
    """Continuous node features (Batch.node_feat_float, graphs that are not molecules) → float
    [..., dim] by one linear map; zero on padding nodes, as the categorical table's padding row."""

    def __init__(self, num_features: int, dim: int):
        super().__init__()
        self.linear = Linear(num_features, dim)

    def forward(self, feat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """float [..., F], bool mask [...] (True on real nodes) → float [..., dim]."""
        if feat.shape[-1] != self.linear.in_features:
            raise ValueError(f"expected {self.linear.in_features} continuous node features, got {feat.shape[-1]}")
        out = self.linear(feat.to(self.linear.weight.dtype))
        return out * mask[..., None].to(out.dtype)


def node_embedding(vocab: list[int], float_features: int, dim: int) -> nn.Module:
    """The node input of a model: ContinuousEmbedding when `float_features` > 0 (the config switch
    node_float_dim), else the categorical FeatureEmbedding of `vocab`."""
    return ContinuousEmbedding(float_features, dim) if float_features > 0 else FeatureEmbedding(vocab, dim)


def embed_nodes(embed: nn.Module, batch) -> torch.Tensor:
    """[B, N, dim] node embeddings of a Batch through `node_embedding`'s module."""
    if isinstance(embed, ContinuousEmbedding):
        if batch.node_feat_float is None:
            raise ValueError("this model takes continuous node features (node_float_dim > 0); the batch has no node_feat_float")
        return embed(batch.node_feat_float, batch.node_mask)
    return embed(batch.node_feat)


def embed_edge_batch(node_embed: nn.Module | None, float_embed: nn.Linear | None, batch, model: str,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
    """[N_total, dim] node embeddings of an EdgeBatch for the edge-list models (sparse ET, MNA-GT):
    the categorical table's sum plus the linear map of the continuous features, whichever the
    model has; `model` names it in the error when the batch lacks an input it embeds. With `rows`
    (node positions), those nodes' embeddings only, [R, dim]."""
    x = None
    if node_embed is not None:
        if batch.node_feat is None:
            raise ValueError(f"this {model} embeds categorical node features; the batch has no node_feat")
        x = node_embed(batch.node_feat if rows is None else batch.node_feat[rows])
    if float_embed is not None:
        if batch.node_feat_float is None:
            raise ValueError(f"this {model} embeds {float_embed.in_features} continuous features; the batch has no node_feat_float")
        features = batch.node_feat_float if rows is None else batch.node_feat_float[rows]
        floats = float_embed(features.to(float_embed.weight.dtype))
        x = floats if x is None else x + floats  # not 0 + floats: a copy of every node's row, and its memory
    return 0 if x is None else x
