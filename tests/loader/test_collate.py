"""collate: every tensor agrees with the records it came from, and padding never leaks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gtscale.format import schema
from gtscale.loader.collate import BATCH_KEYS, collate
from gtscale.format.decode import Record
from gtscale.loader.path_edges import graph_path_edges
from gtscale.format.shardfile import ShardError

# the molecular keys; target_y: test_ego_loader.py; graph_feat (not in these fixtures): below
ALL_KEYS = [k for k in BATCH_KEYS if k not in (schema.TARGET_Y, schema.GRAPH_FEAT)]


def _records(nci_by_idx, count: int, start: int = 0) -> list[Record]:
    chosen = list(nci_by_idx.items())[start : start + count]
    return [
        Record(f"{idx:010d}", "test.tar", len(r[schema.NODE_FEAT]), idx, {k: v for k, v in r.items() if k != schema.META})
        for idx, r in chosen
    ]


def test_collated_tensors_agree_with_records_and_padding_is_inert(nci_by_idx):
    records = _records(nci_by_idx, 9)
    batch = collate(records, ALL_KEYS, max_dist=4)
    sizes = [r.num_nodes for r in records]
    b, n = len(records), max(sizes)
    assert batch.node_feat.shape == (b, n, 9) and batch.edge_feat.shape == (b, n, n, 3)
    assert batch.path_edges.shape == (b, n, n, 4, 3)
    assert batch.node_feat.dtype == torch.long and batch.spd.dtype == torch.long and batch.svd_pe.dtype == torch.float32
    for g, r in enumerate(records):
        a, k = r.arrays, sizes[g]
        assert batch.node_mask[g].tolist() == [True] * k + [False] * (n - k)
        np.testing.assert_array_equal(batch.node_feat[g, :k].numpy(), a[schema.NODE_FEAT].astype(np.int64) + schema.FEATURE_SHIFT)
        dense_edges = np.zeros((k, k, 3), np.int64)
        src, dst = a[schema.EDGE_INDEX].astype(np.int64)
        dense_edges[src, dst] = a[schema.EDGE_FEAT].astype(np.int64) + schema.FEATURE_SHIFT
        np.testing.assert_array_equal(batch.edge_feat[g, :k, :k].numpy(), dense_edges)
        np.testing.assert_array_equal(batch.spd[g, :k, :k].numpy(), a[schema.SPD])
        np.testing.assert_array_equal(batch.in_degree[g, :k].numpy(), a[schema.IN_DEGREE])
        np.testing.assert_array_equal(batch.out_degree[g, :k].numpy(), a[schema.OUT_DEGREE])
        np.testing.assert_array_equal(batch.svd_pe[g, :k].numpy(), a[schema.SVD_PE].astype(np.float32))
        np.testing.assert_array_equal(batch.lap_pe[g, :k].numpy(), a[schema.LAP_PE].astype(np.float32))
        np.testing.assert_array_equal(batch.lap_eigval[g].numpy(), a[schema.LAP_EIGVAL].astype(np.float32))
        y = a[schema.Y]
        np.testing.assert_array_equal(batch.y_mask[g].numpy(), ~np.isnan(y))
        np.testing.assert_array_equal(batch.y[g].numpy(), np.nan_to_num(y, nan=0.0))
        node_y = a[schema.NODE_Y]
        np.testing.assert_array_equal(batch.node_y_mask[g, :k].numpy(), ~np.isnan(node_y))
        np.testing.assert_array_equal(batch.node_y[g, :k].numpy(), np.nan_to_num(node_y, nan=0.0))
        expected_paths = graph_path_edges(a[schema.EDGE_INDEX], a[schema.EDGE_FEAT], a[schema.SPD], a[schema.PRED], 4)
        np.testing.assert_array_equal(batch.path_edges[g, :k, :k].numpy(), expected_paths)
        assert batch.idx[g] == r.idx

        # padding: nothing of a real graph, and the documented pad values
        assert (batch.node_feat[g, k:] == schema.FEATURE_PAD).all()
        for t in (batch.edge_feat, batch.path_edges):
            assert (t[g, k:] == schema.FEATURE_PAD).all() and (t[g, :, k:] == schema.FEATURE_PAD).all()
        assert (batch.spd[g, k:] == schema.SPD_UNREACHABLE).all() and (batch.spd[g, :, k:] == schema.SPD_UNREACHABLE).all()
        for t in (batch.in_degree, batch.out_degree, batch.svd_pe, batch.lap_pe, batch.node_y):
            assert (t[g, k:] == 0).all()
        assert not batch.node_y_mask[g, k:].any()
    assert not torch.isnan(batch.y).any() and not torch.isnan(batch.node_y).any()


def test_only_requested_fields_are_built(nci_by_idx):
    batch = collate(_records(nci_by_idx, 3), [schema.SPD])
    assert batch.spd is not None
    assert batch.svd_pe is None and batch.y is None and batch.path_edges is None and batch.in_degree is None


def test_sign_flips_keep_the_svd_product_and_are_seeded(nci_by_idx):
    records = _records(nci_by_idx, 16)
    plain = collate(records, ALL_KEYS)
    flipped = collate(records, ALL_KEYS, rng=np.random.default_rng(7))
    again = collate(records, ALL_KEYS, rng=np.random.default_rng(7))
    torch.testing.assert_close(flipped.svd_pe, again.svd_pe, rtol=0, atol=0)
    torch.testing.assert_close(flipped.lap_pe, again.lap_pe, rtol=0, atol=0)
    assert not torch.equal(flipped.svd_pe, plain.svd_pe) and not torch.equal(flipped.lap_pe, plain.lap_pe)
    torch.testing.assert_close(flipped.svd_pe.abs(), plain.svd_pe.abs(), rtol=0, atol=0)
    torch.testing.assert_close(flipped.lap_pe.abs(), plain.lap_pe.abs(), rtol=0, atol=0)
    r = plain.svd_pe.shape[2] // 2

    def product(batch):  # (U√Σ)(V√Σ)ᵀ: a flip of a left vector with its right vector leaves it unchanged
        return batch.svd_pe[:, :, :r] @ batch.svd_pe[:, :, r:].transpose(1, 2)

    torch.testing.assert_close(product(flipped), product(plain))
    # each Laplacian eigenvector flips as a whole: per graph and column one sign
    ratio = torch.where(plain.lap_pe != 0, flipped.lap_pe / plain.lap_pe, torch.nan)
    for g in range(ratio.shape[0]):
        for c in range(ratio.shape[2]):
            signs = ratio[g, :, c][~torch.isnan(ratio[g, :, c])]
            assert signs.numel() == 0 or (signs == signs[0]).all()


def test_graphs_with_different_feature_widths_are_named(nci_by_idx):
    records = _records(nci_by_idx, 3)
    records[1].arrays[schema.NODE_FEAT] = records[1].arrays[schema.NODE_FEAT][:, :5]
    with pytest.raises(ShardError, match=f"sample {records[1].key}: node_feat has shape"):
        collate(records, [])


def test_a_pred_entry_outside_the_graph_is_named(nci_by_idx):
    records = _records(nci_by_idx, 3)
    pred = records[2].arrays[schema.PRED].copy()
    pred[0, 1] = records[2].num_nodes + 3
    records[2].arrays[schema.PRED] = pred
    with pytest.raises(ShardError, match=f"sample {records[2].key}: pred holds node ids outside the graph"):
        collate(records, [], max_dist=3)


def test_graph_features_are_stacked_one_row_per_graph(nci_by_idx):
    records = _records(nci_by_idx, 4)
    rows = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float16)
    for record, row in zip(records, rows):
        record.arrays[schema.GRAPH_FEAT] = row
    batch = collate(records, [schema.GRAPH_FEAT])
    assert batch.graph_feat.dtype == torch.float32
    np.testing.assert_array_equal(batch.graph_feat.numpy(), rows.astype(np.float32))
    assert collate(records).graph_feat is None  # only when asked for


def test_a_filler_batch_carries_graph_features_of_the_shards_width():
    """A rank out of evaluation data feeds a filler batch shaped like the real ones (lockstep)."""
    from gtscale.loader.batch import FILLER_IDX
    from gtscale.loader.filler import filler_record

    manifest = {"transform": {"svd_rank": 2, "lap_k": 0}, "task": {"num_targets": 1}, "features": {"graph": {"dim": 7}}}
    batch = collate([filler_record(manifest, (schema.GRAPH_FEAT, schema.Y))], [schema.GRAPH_FEAT, schema.Y])
    assert batch.graph_feat.shape == (1, 7) and batch.idx.tolist() == [FILLER_IDX]
