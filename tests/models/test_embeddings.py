"""The flat feature table's offset convention and the token / pair packing."""

import pytest
import torch
from torch import nn

from gtscale.models.embeddings import FeatureEmbedding, lookup


def test_offsets_give_each_column_its_own_rows():
    emb = FeatureEmbedding([3, 2, 4], dim=5)
    assert emb.table.num_embeddings == 1 + 3 + 2 + 4
    feat = torch.tensor([[1, 2, 4], [3, 0, 1], [0, 0, 0]])  # shifted values; 0 = padding
    assert emb.rows(feat).tolist() == [[1, 5, 9], [3, 0, 6], [0, 0, 0]]
    w = emb.table.weight
    expected = torch.stack([w[1] + w[5] + w[9], w[3] + w[6], torch.zeros(5)])
    torch.testing.assert_close(emb(feat), expected)


def test_authors_table_layout():
    # 128 rows per column reproduces the EGT authors' 9·128 + 1 row atom table
    assert FeatureEmbedding([128] * 9, 4).table.num_embeddings == 9 * 128 + 1


def test_graphormer_takes_continuous_features_by_the_same_switch(ego_shards):
    from gtscale.format import schema
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader
    from gtscale.models import build_model
    from gtscale.models.embeddings import ContinuousEmbedding
    from model_fixtures import TINY_GRAPHORMER

    _, shards = ego_shards
    keys = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.TARGET_Y]
    config = LoaderConfig(node_budget=256, bucketing=False, num_workers=0, keys=keys, path_edges_max_dist=3)
    batch = next(iter(build_loader(shards, "val", config, train=False, rank=0, world_size=1)))
    torch.manual_seed(0)
    model = build_model({**TINY_GRAPHORMER, "node_float_dim": batch.node_feat_float.shape[-1], "edge_vocab": [1]})
    assert isinstance(model.atom_embed, ContinuousEmbedding)
    out = model(batch)
    out.node.sum().backward()
    assert torch.isfinite(out.node).all() and model.atom_embed.linear.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_lookup_equals_the_embedding_with_its_gradient(padding_idx):
    """embeddings.lookup (embedding_bag, one row per bag) is nn.Embedding's function: values, and
    gradients that leave the padding row untrained."""
    torch.manual_seed(0)
    table = nn.Embedding(7, 5, padding_idx=padding_idx)
    index = torch.randint(0, 7, (3, 4, 4))
    upstream = torch.randn(3, 4, 4, 5)
    (lookup(table, index) * upstream).sum().backward()
    ours, table.weight.grad = table.weight.grad, None
    (table(index) * upstream).sum().backward()
    torch.testing.assert_close(lookup(table, index), table(index))
    torch.testing.assert_close(ours, table.weight.grad)
    if padding_idx is not None:
        assert (index == padding_idx).any() and ours[padding_idx].abs().sum() == 0
