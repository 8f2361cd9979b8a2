"""`.npy` bytes without pickle: fast encoding for the writer, safe decoding for every reader.

The encoder produces exactly the bytes of ``np.save`` (format 1.0) but caches headers by
(dtype, shape), which matters when a shard holds millions of small arrays.
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=8192)
def _header(dtype_str: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype_str))
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


@lru_cache(maxsize=8192)
def _header_of(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    if dtype.hasobject:
        raise ValueError("refusing to encode an object array: shards hold numbers only")
    return _header(dtype.str, shape)


def encode_npy(array: np.ndarray) -> bytes:
    """The bytes ``np.save(f, array)`` would write (C order, format 1.0)."""
    if type(array) is not np.ndarray:
        array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (not unconditionally: it turns 0-d arrays into 1-d)
    return _header_of(array.dtype, array.shape) + array.tobytes()  # by dtype object: no .str per call


class UnsafeArrayError(ValueError):
    """An .npy member would need unpickling (object dtype): refused."""


def decode_npy(data: bytes, name: str = "<array>") -> np.ndarray:
    """Decode .npy bytes; never unpickles. `name` is used in error messages."""
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise UnsafeArrayError(f"{name}: holds a pickled object array; refusing to unpickle") from err
        raise ValueError(f"{name}: not a valid .npy array ({err})") from err
