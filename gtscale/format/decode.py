"""Sample members (bytes) → a `Record` of numpy arrays, checked against the record contract.

`np.load` costs ~25 µs per array, 300 µs per molecule. Here an .npy header is parsed once (with
numpy's own safe header reader, never unpickling) and remembered by its exact bytes; later arrays
with the same header — same dtype and shape, the common case for molecules — are one
`np.frombuffer` plus a copy of their own bytes. Object dtypes are refused like
`gtscale.format.npy.decode_npy` refuses them. Headers the cache does not handle (Fortran order)
go through `decode_npy` itself.

Only the keys the consumer needs are decoded. A record lacking one raises `MissingKeyError`
naming the key and the sharder option that produces it (`schema.PRODUCED`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from gtscale.format import schema
from gtscale.format.shardfile import ShardError
from gtscale.errors import UserError
from gtscale.format.npy import UnsafeArrayError, decode_npy

_MAGIC = b"\x93NUMPY"
_HEADER_CACHE_LIMIT = 8192
#: header bytes → (dtype, shape, data offset, payload bytes), or None for "use decode_npy"
_headers: dict[bytes, tuple[np.dtype, tuple[int, ...], int, int] | None] = {}


class MissingKeyError(UserError):
    """A record lacks a key the model needs: the shards were written without it."""

    def __init__(self, shard: str, sample: str, key: str):
        produced = schema.PRODUCED[key].how
        super().__init__(f"{shard}: sample {sample}: record has no {key!r}, which this model needs; it is produced by {produced}")
        self.shard, self.sample, self.key = shard, sample, key

    def __reduce__(self):
        return (MissingKeyError, (self.shard, self.sample, self.key))


@dataclass(slots=True)
class Record:
    """One decoded graph: its arrays plus where it came from."""

    key: str
    shard: str
    num_nodes: int
    idx: int
    arrays: dict[str, np.ndarray]


def _parse_header(header: bytes, name: str) -> tuple[np.dtype, tuple[int, ...], int, int] | None:
    stream = io.BytesIO(header)
    major, _ = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(stream)
    if dtype.hasobject:
        raise UnsafeArrayError(f"{name}: holds a pickled object array; refusing to unpickle")
    if fortran_order:
        return None
    return dtype, tuple(shape), len(header), int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def decode_array(data: memoryview | bytes, name: str) -> np.ndarray:
    """The array of an .npy payload, copied out of `data` (so a record never pins a whole shard's
    bytes); ValueError (UnsafeArrayError for pickles) when invalid."""
    if len(data) < 10 or data[:6] != _MAGIC:
        raise ValueError(f"{name}: not an .npy array")
    if data[6] == 1:
        header_end = 10 + (data[8] | data[9] << 8)
    else:
        header_end = 12 + int.from_bytes(data[8:12], "little")
    header = bytes(data[:header_end])
    if header not in _headers:
        if len(_headers) >= _HEADER_CACHE_LIMIT:
            _headers.clear()
        try:
            _headers[header] = _parse_header(header, name)
        except UnsafeArrayError:  # a ValueError too, but its message is already the right one
            raise
        except (ValueError, SyntaxError) as err:  # numpy's header reader raises these
            raise ValueError(f"{name}: not a valid .npy header ({err})") from err
    parsed = _headers[header]
    if parsed is None:
        return decode_npy(bytes(data), name)
    dtype, shape, offset, nbytes = parsed
    if len(data) - offset != nbytes:
        raise ValueError(f"{name}: {len(data) - offset} data bytes, its header promises {nbytes}")
    return np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape).copy()


def _check_shapes(arrays: Mapping[str, np.ndarray], n: int) -> str | None:
    """Why the arrays break the record contract for a graph of n nodes, or None."""
    feature_key = schema.NODE_FEAT if schema.NODE_FEAT in arrays else schema.NODE_FEAT_FLOAT
    if arrays[feature_key].ndim != 2:
        return f"{feature_key} has shape {arrays[feature_key].shape}, expected [N, F]"
    edge_index, edge_feat = arrays[schema.EDGE_INDEX], arrays.get(schema.EDGE_FEAT)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        return f"edge_index has shape {edge_index.shape}, expected [2, E]"
    if edge_feat is not None and (edge_feat.ndim != 2 or edge_feat.shape[0] != edge_index.shape[1]):
        return f"edge_index {edge_index.shape} and edge_feat {edge_feat.shape} do not describe the same E edges"
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        return f"edge_index holds node ids outside 0..{n - 1}"
    expected = {
        schema.SPD: (n, n), schema.PRED: (n, n), schema.FW_MID: (n, n), schema.IN_DEGREE: (n,), schema.OUT_DEGREE: (n,), schema.NODE_Y: (n,),
        schema.NODE_ID: (n,),
    }
    for key, array in arrays.items():
        if key in expected and array.shape != expected[key]:
            return f"{key} has shape {array.shape}, expected {expected[key]}"
        if key == schema.GRAPH_FEAT and array.ndim != 1:
            return f"{key} has shape {array.shape}, expected [G]"
        if key in (schema.SVD_PE, schema.LAP_PE) and (array.ndim != 2 or array.shape[0] != n):
            return f"{key} has shape {array.shape}, expected [{n}, *]"
    targets = arrays.get(schema.TARGET_POS)
    if targets is not None:
        if targets.ndim != 1 or (targets.size and (targets.min() < 0 or targets.max() >= n)):
            return f"target_pos {targets.shape} must be a vector of node indices in 0..{n - 1}"
        labels = arrays.get(schema.TARGET_Y)
        if labels is not None and labels.shape != targets.shape:
            return f"target_y has shape {labels.shape}, target_pos {targets.shape}: one label per target"
    return None


def _feature_keys(members: Mapping[str, memoryview], shard: str, key: str) -> tuple[str, ...]:
    """The node-feature key of this record and the keys that go with it: node_feat with edge_feat
    (categorical, molecules) or node_feat_float alone (continuous, sampled subgraphs)."""
    if f"{schema.NODE_FEAT}.npy" in members:
        return (schema.NODE_FEAT, schema.EDGE_FEAT)
    if f"{schema.NODE_FEAT_FLOAT}.npy" in members:
        return (schema.NODE_FEAT_FLOAT,)
    raise ShardError(shard, key, f"no {schema.NODE_FEAT}.npy or {schema.NODE_FEAT_FLOAT}.npy (node features), which every record has (incomplete sample)")


def decode_record(key: str, members: Mapping[str, memoryview], shard: str, keys: Iterable[str]) -> Record:
    """Decode the arrays in `keys` (plus the ones every record has, and those of
    schema.DECODED_WITH that this record has) and check their shapes.

    Raises MissingKeyError for an absent key, ShardError for anything malformed."""
    if "meta.json" not in members:
        raise ShardError(shard, key, "no meta.json, which every record has (incomplete sample)")
    try:
        meta = json.loads(bytes(members["meta.json"]))
        idx = int(meta["idx"])
    except (ValueError, KeyError, TypeError) as err:
        raise ShardError(shard, key, f"meta.json is not a JSON object with an integer 'idx' ({err})") from err
    arrays = {}
    features = _feature_keys(members, shard, key)
    keys = tuple(keys)
    companions = [c for k in keys for c in schema.DECODED_WITH.get(k, ()) if f"{c}.npy" in members]
    for field in dict.fromkeys((*features, *schema.REQUIRED_KEYS, *keys, *companions)):
        if field == schema.META:
            continue
        member = members.get(f"{field}.npy")
        if member is None and field in (*features, *schema.REQUIRED_KEYS):
            raise ShardError(shard, key, f"no {field}.npy, which every record has (incomplete sample)")
        if member is None:
            raise MissingKeyError(shard, key, field)
        try:
            arrays[field] = decode_array(member, f"{field}.npy")
        except ValueError as err:  # UnsafeArrayError included
            raise ShardError(shard, key, str(err)) from err
    n = int(arrays[features[0]].shape[0]) if arrays[features[0]].ndim else 0
    problem = _check_shapes(arrays, n)
    if problem is not None:
        raise ShardError(shard, key, problem)
    return Record(key, shard, n, idx, arrays)
