"""Deterministic tar writing for WebDataset shards.

A sample becomes tar members ``<key>.<field>.npy`` (``<key>.meta.json`` for the metadata), in
sorted field order, with fixed mtime, owner and mode: the same records give byte-identical shards
whatever machine, worker count or time wrote them. Shards are written under a temporary name and
renamed when complete, so a killed run never leaves a truncated shard that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

from gtscale.format import schema
from gtscale.format.npy import decode_npy, encode_npy
from gtscale.format.shardfile import ShardError, iter_samples
from gtscale.io import note_disk_full

FIXED_MTIME = 0
FIXED_MODE = 0o444


def sample_key(idx: int, center: int | None = None) -> str:
    """WebDataset sample key: the source idx, zero-padded so keys sort numerically.
    Sampled subgraphs of one big graph add their center node to stay unique."""
    return f"{idx:010d}" if center is None else f"{idx:010d}_{center:010d}"


def sample_members(record: Mapping[str, object]) -> list[tuple[str, bytes]]:
    """(suffix, bytes) pairs of one record: arrays as .npy, `meta` as compact sorted JSON."""
    members = []
    for field in sorted(record):
        value = record[field]
        if field == schema.META:
            members.append(("meta.json", json.dumps(value, sort_keys=True, separators=(",", ":")).encode()))
        else:
            members.append((_NPY_SUFFIX.get(field) or f"{field}.npy", encode_npy(value)))
    return members


_NPY_SUFFIX = {key: f"{key}.npy" for key in vars(schema).values() if isinstance(key, str) and key.islower() and key.isidentifier()}


BLOCK = 512
RECORD = 20 * BLOCK  # tar archives are padded to whole records, as tarfile does
_CHKSUM = slice(148, 156)


def _header_template() -> bytes:
    """A ustar header as Python's tarfile writes it for our fixed fields, with an empty name."""
    info = tarfile.TarInfo("")
    info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, FIXED_MODE, 0, 0, "", ""
    return info.tobuf(format=tarfile.USTAR_FORMAT)


_TEMPLATE = bytearray(_header_template())
_TEMPLATE[_CHKSUM] = b" " * 8  # the checksum is computed with its own field as spaces
_TEMPLATE_SUM = sum(_TEMPLATE)
_SIZE_FIELD_SUM = sum(_TEMPLATE[124:136])
_TEMPLATE = bytes(_TEMPLATE)
_HEADER_TAIL = _TEMPLATE[156:]
_PADDING = [bytes(-r % BLOCK) for r in range(BLOCK)]  # zeros after a member of size ≡ r (mod 512)


def ustar_header(name: str, size: int) -> bytes:
    """The 512-byte header tarfile would write for a regular file `name` of `size` bytes.

    Python's tarfile spends ~30 µs per member (TarInfo copies, per-field formatting); a shard of a
    PCQM4Mv2-sized dataset has tens of millions of members, so the header is patched from a
    template instead. tests/format/test_npy_tario.py checks the bytes against tarfile's."""
    key, _, suffix = name.partition(".")
    return _member_header(key.encode(), suffix, size)


def _member_header(key: bytes, suffix: str, size: int) -> bytes:
    """Header of member `<key>.<suffix>`: all but the key and the checksum comes from a cache."""
    middle, partial_sum = _header_parts(len(key), suffix, size)
    return b"".join((key, middle, b"%06o\0 " % (partial_sum + sum(key)), _TEMPLATE[156:]))


@lru_cache(maxsize=65536)
def _header_parts(key_len: int, suffix: str, size: int) -> tuple[bytes, int]:
    """Bytes key_len..148 of the header (".suffix", padding, mode…size…mtime) and their checksum
    contribution with the checksum field counted as spaces: what every record shares."""
    rest = f".{suffix}".encode()
    if key_len + len(rest) > 100:
        raise ValueError(f"tar member name longer than 100 bytes: <{key_len}-byte key>.{suffix}")
    size_field = b"%011o\0" % size
    middle = rest + _TEMPLATE[key_len + len(rest) : 124] + size_field + _TEMPLATE[136:148]
    partial_sum = _TEMPLATE_SUM + sum(rest) + sum(size_field) - _SIZE_FIELD_SUM
    return middle, partial_sum


class ShardWriter:
    """Writes one shard to ``<path>.tmp``; `close()` renames it to `path` and returns its stats.

    The sha256 is computed while writing, so finishing a shard never reads it back."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.tmp_path, "wb", buffering=1 << 20)
        self._digest = hashlib.sha256()
        self._size = 0
        self._writing = 0  # bytes of the write under way: what a full disk refused, at least
        self.num_samples = 0

    def _emit(self, data: bytes) -> None:
        self._writing = len(data)
        self._file.write(data)
        self._writing = 0
        self._digest.update(data)
        self._size += len(data)

    def write(self, key: str, record: Mapping[str, object]) -> None:
        # `sample_members` + `_member_header` inlined: a graph record has a dozen small members,
        # and per-member call overhead was most of the writer's cost (the key's checksum
        # contribution is summed once per record, not per member).
        encoded_key = key.encode()
        key_len, key_sum = len(encoded_key), sum(encoded_key)
        chunks = []
        for suffix, data in sample_members(record):
            size = len(data)
            middle, partial_sum = _header_parts(key_len, suffix, size)
            chunks += (encoded_key, middle, b"%06o\0 " % (partial_sum + key_sum), _HEADER_TAIL, data, _PADDING[size % BLOCK])
        self._emit(b"".join(chunks))
        self.num_samples += 1

    def close(self) -> dict:
        end = 2 * BLOCK
        end += -(self._size + end) % RECORD
        self._emit(bytes(end))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        stats = {"samples": self.num_samples, "bytes": self._size, "sha256": self._digest.hexdigest()}
        os.replace(self.tmp_path, self.path)
        return stats

    def abort(self) -> None:
        try:
            self._file.close()  # flushes the buffer: fails again on a full disk
        except OSError:
            pass
        finally:
            self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            note_disk_full(exc, self.tmp_path, self._size + self._writing)  # before abort frees the space
            self.abort()


def write_shard(path: str | os.PathLike, samples: Iterable[tuple[str, Mapping[str, object]]]) -> dict:
    """Write (key, record) pairs to one shard atomically; returns {samples, bytes, sha256}."""
    with ShardWriter(path) as writer:
        for key, record in samples:
            writer.write(key, record)
        return writer.close()


def iter_shard(path: str | os.PathLike, schema_version: int = schema.SCHEMA_VERSION):
    """Yield (key, {field: array or meta dict}) of every sample of a shard, all fields decoded.

    For inspection and verification: the same reader and checks as training (shardfile.py:
    truncation, pickle refusal, the current names of an older `schema_version`'s keys), and .npy
    decoding that never unpickles."""
    path = Path(path)
    for key, members in iter_samples(path.read_bytes(), str(path), schema_version):
        record = {}
        for ext, payload in members.items():
            field, _, kind = ext.rpartition(".")
            if kind == "npy":
                record[field] = decode_npy(bytes(payload), f"{path}:{key}.{ext}")
            elif kind == "json":
                record[field] = json.loads(bytes(payload))
            else:
                raise ShardError(str(path), key, f"member {key}.{ext} is neither .npy nor .json")
        yield key, record
