"""Fast .npy decoding equals np.load, never unpickles, and records are checked against the contract."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gtscale.format import schema
from gtscale.format.decode import MissingKeyError, decode_array, decode_record
from gtscale.format.shardfile import ShardError
from gtscale.format.npy import UnsafeArrayError, encode_npy
from gtscale.format.tario import sample_members

DTYPES = st.sampled_from([np.uint8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_])


@settings(max_examples=80, deadline=None)
@given(DTYPES.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))))
def test_decode_array_equals_np_load(array):
    data = encode_npy(array)
    for _ in range(2):  # second time through the header cache
        decoded = decode_array(memoryview(data), "a.npy")
        expected = np.load(io.BytesIO(data), allow_pickle=False)
        assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
        np.testing.assert_array_equal(decoded, expected)


def test_fortran_order_and_version_2_headers_decode():
    array = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=(2, 0))
    np.testing.assert_array_equal(decode_array(buf.getvalue(), "f.npy"), array)


def test_object_arrays_are_refused_without_unpickling():
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsafeArrayError, match="refusing to unpickle"):
        decode_array(buf.getvalue(), "node_feat.npy")


def test_short_payload_and_garbage_are_errors():
    data = encode_npy(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="data bytes, its header promises 16"):
        decode_array(data[:-3], "spd.npy")
    with pytest.raises(ValueError, match="not an .npy array"):
        decode_array(pickle.dumps([1, 2]), "node_feat.npy")


def _members(record: dict) -> dict[str, memoryview]:
    return {suffix: memoryview(data) for suffix, data in sample_members(record)}


def test_decode_record_reads_only_what_is_asked(nci_by_idx):
    idx, record = next(iter(nci_by_idx.items()))
    decoded = decode_record("k", _members(record), "s.tar", [schema.SPD, schema.Y])
    assert decoded.idx == idx and decoded.num_nodes == len(record[schema.NODE_FEAT])
    assert sorted(decoded.arrays) == sorted([schema.NODE_FEAT, schema.EDGE_INDEX, schema.EDGE_FEAT, schema.SPD, schema.Y])
    np.testing.assert_array_equal(decoded.arrays[schema.SPD], record[schema.SPD])


def test_a_missing_key_names_the_option_that_produces_it(nci_by_idx):
    record = dict(next(iter(nci_by_idx.values())))
    del record[schema.SVD_PE]
    with pytest.raises(MissingKeyError, match=r"s.tar: sample k: record has no 'svd_pe', .* produced by `gtscale shard --svd-rank R` with R > 0"):
        decode_record("k", _members(record), "s.tar", [schema.SVD_PE])
    del record[schema.EDGE_FEAT]
    with pytest.raises(ShardError, match="sample k: no edge_feat.npy, which every record has"):
        decode_record("k", _members(record), "s.tar", [])


@pytest.mark.parametrize(
    "key, bad, message",
    [
        (schema.SPD, np.zeros((2, 3), np.uint8), r"spd has shape \(2, 3\)"),
        (schema.EDGE_INDEX, np.array([[0, 99], [99, 0]], np.int16), "edge_index holds node ids outside"),
        (schema.SVD_PE, np.zeros((1, 8), np.float16), r"svd_pe has shape \(1, 8\)"),
    ],
)
def test_records_that_break_the_contract_are_named(nci_by_idx, key, bad, message):
    record = dict(next(iter(nci_by_idx.values())))
    record[key] = bad
    if key == schema.EDGE_INDEX:
        record[schema.EDGE_FEAT] = np.zeros((2, 3), np.uint8)
    with pytest.raises(ShardError, match=f"s.tar: sample k: {message}"):
        decode_record("k", _members(record), "s.tar", [schema.SPD, schema.SVD_PE])


def _ego_record(n: int = 3) -> dict:
    return {
        schema.NODE_FEAT_FLOAT: np.ones((n, 4), np.float16), schema.EDGE_INDEX: np.array([[0, 1], [1, 0]], np.int16),
        schema.NODE_ID: np.arange(100, 100 + n, dtype=np.int64), schema.TARGET_POS: np.zeros(1, np.int16),
        schema.TARGET_Y: np.ones(1, np.float32), schema.META: {"idx": 100, "num_nodes": n, "num_edges": 2},
    }


def test_continuous_records_decode_without_x_or_edge_attr():
    keys = [schema.TARGET_POS, schema.TARGET_Y, schema.NODE_ID]
    decoded = decode_record("k", _members(_ego_record()), "s.tar", keys)
    assert decoded.num_nodes == 3 and decoded.idx == 100
    assert sorted(decoded.arrays) == sorted([schema.NODE_FEAT_FLOAT, schema.EDGE_INDEX, *keys])
    record = _ego_record()
    del record[schema.NODE_FEAT_FLOAT]
    with pytest.raises(ShardError, match="sample k: no node_feat.npy or node_feat_float.npy"):
        decode_record("k", _members(record), "s.tar", [])


@pytest.mark.parametrize(
    "key, bad, message",
    [
        (schema.TARGET_POS, np.array([3], np.int16), r"target_pos \(1,\) must be a vector of node indices in 0..2"),
        (schema.TARGET_Y, np.ones(2, np.float32), r"target_y has shape \(2,\), target_pos \(1,\)"),
        (schema.NODE_ID, np.arange(2, dtype=np.int64), r"node_id has shape \(2,\), expected \(3,\)"),
        (schema.NODE_FEAT_FLOAT, np.ones(3, np.float16), r"node_feat_float has shape \(3,\), expected \[N, F\]"),
    ],
)
def test_continuous_records_that_break_the_contract_are_named(key, bad, message):
    record = _ego_record()
    record[key] = bad
    with pytest.raises(ShardError, match=f"s.tar: sample k: {message}"):
        decode_record("k", _members(record), "s.tar", [schema.TARGET_POS, schema.TARGET_Y, schema.NODE_ID])
