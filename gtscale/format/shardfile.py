"""One shard file → its samples, with every integrity check the loader makes before decoding.

A shard is read whole into memory (10–20 MB), its size and sha256 are compared with the manifest
*before* any sample leaves, and then its tar members are walked in place. Reading whole shards is
what lets `on_error: skip` drop a shard that fails its checksum without having yielded half of it.

Why not WebDataset's `tar_file_iterator`: it goes through Python's `tarfile`, which costs about
300 µs per molecule (13 members) — more than the whole per-graph budget of the loader. Our shards
are plain USTAR archives written by `gtscale.format.tario`, whose headers are parsed here in about
15 µs per molecule. An archive holding anything else (pax or GNU long-name headers) is read with
`tarfile` instead, so foreign but valid shards still load. Members are grouped into samples with
WebDataset's key convention (`base_plus_ext`: the key is the name up to the first dot).

Errors name the shard and the sample key: `ShardError("train/train-000003.tar: sample
0000001234: ...")`. A member whose extension means pickle is refused, never decoded.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.manifest import missing_split, split_parts

#: Extensions WebDataset (and torch) would decode by unpickling; a shard must never contain them.
PICKLE_EXTENSIONS = frozenset({"pyd", "pickle", "pkl", "pth", "pt"})
_BLOCK = 512
_REGULAR = (b"0", b"\0")
_DIRECTORY = b"5"


class ShardError(UserError):
    """A shard or one of its samples is missing, truncated, corrupt or unsafe.

    `shard` is the path as the manifest lists it; `key` the sample key, or None when the problem
    concerns the whole file (a checksum mismatch, a missing file)."""

    def __init__(self, shard: str, key: str | None, reason: str):
        where = f"{shard}: sample {key}" if key is not None else shard
        super().__init__(f"{where}: {reason}")
        self.shard, self.key, self.reason = shard, key, reason

    def __reduce__(self):  # DataLoader workers send errors to the main process by pickling
        return (ShardError, (self.shard, self.key, self.reason))


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest lists it."""

    name: str  # path relative to the manifest folder, used in every message
    folder: Path  # the manifest's folder
    samples: int
    bytes: int | None = None
    sha256: str | None = None
    schema_version: int = schema.SCHEMA_VERSION  # the manifest's: which names its records' members have

    @property
    def path(self) -> Path:
        return self.folder / self.name


def inside_folder(folder: Path, name: str) -> Path:
    """folder/name, the shard file a manifest lists, once it is clear that no symbolic link on the
    way leads out of `folder`: load_manifest refuses `..` and absolute names, but a link inside
    the folder (a shard file, or a split folder) could still point anywhere, and a checksum proves
    a file's bytes, not where it lies. A ShardError naming the shard otherwise."""
    path = folder / name
    target = path.resolve()
    if not target.is_relative_to(folder.resolve()):
        raise ShardError(name, None, f"a symbolic link leads out of the shard folder {folder} (to {target}); copy the file into the folder")
    return path


def manifest_shards(manifest: dict, split: str) -> list[ShardEntry]:
    """The shards of `split` in manifest order (a manifest from `gtscale.format.manifest.load_manifest`);
    of a union ("train+valid", manifest.SPLIT_UNION) each part's in turn."""
    splits = manifest.get("splits", {})
    missing = missing_split(manifest, split)
    if missing is not None:
        raise UserError(f"{manifest.get('_dir', 'manifest')}: no split {missing!r} (has: {', '.join(sorted(splits)) or 'none'})")
    root = Path(manifest.get("_dir", "."))
    version = manifest.get("schema_version", schema.SCHEMA_VERSION)
    entries = []
    for part in split_parts(split):
        for i, shard in enumerate(splits[part].get("shards", [])):
            if "path" not in shard or "samples" not in shard:
                raise UserError(f"{root}: manifest splits.{part}.shards[{i}] lacks 'path' or 'samples'")
            entries.append(ShardEntry(shard["path"], root, int(shard["samples"]), shard.get("bytes"), shard.get("sha256"), version))
    return entries


def read_shard(entry: ShardEntry, verify: bool) -> bytes:
    """The shard's bytes, read from inside its folder; with `verify`, its size and sha256 must match
    the manifest."""
    try:
        data = inside_folder(entry.folder, entry.name).read_bytes()
    except FileNotFoundError:
        raise ShardError(entry.name, None, f"shard file is missing ({entry.path})") from None
    except OSError as err:
        raise ShardError(entry.name, None, f"cannot read the shard ({err.strerror})") from err
    if verify and entry.bytes is not None and len(data) != entry.bytes:
        raise ShardError(entry.name, None, f"{len(data)} bytes, the manifest says {entry.bytes} (truncated or replaced)")
    if verify and entry.sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise ShardError(entry.name, None, f"sha256 {digest[:12]}… does not match the manifest's {entry.sha256[:12]}…")
    return data


def _text(header: bytes, start: int, stop: int) -> str:
    """A NUL-terminated (or field-filling) string field of a tar header."""
    nul = header.find(b"\0", start, stop)
    return header[start : nul if nul >= 0 else stop].decode()


def _ustar_members(data: bytes, shard: str) -> list[tuple[str, memoryview]] | None:
    """(name, bytes) of every regular member, or None when the archive needs `tarfile` (pax/GNU)."""
    view = memoryview(data)
    members: list[tuple[str, memoryview]] = []
    offset, end = 0, len(data)
    while True:
        if offset + _BLOCK > end:
            last = members[-1][0] if members else "(none)"
            raise ShardError(shard, _key_of(last), "archive ends without its end-of-archive marker (truncated)")
        header = data[offset : offset + _BLOCK]
        if header[0] == 0:
            if header.count(0) == _BLOCK:
                return members
            raise ShardError(shard, _key_of(members[-1][0]) if members else None, f"corrupt tar header at byte {offset}")
        kind = header[156:157]
        try:
            name = _text(header, 0, 100)
            if header[257:262] == b"ustar" and header[345] != 0:
                name = _text(header, 345, 500) + "/" + name
            size = int(header[124:136].rstrip(b" \0") or b"0", 8)
        except (UnicodeDecodeError, ValueError):
            raise ShardError(shard, _key_of(members[-1][0]) if members else None, f"corrupt tar header at byte {offset}") from None
        start = offset + _BLOCK
        if start + size > end:
            raise ShardError(shard, _key_of(name), f"member {name} is cut short (truncated shard)")
        if kind in _REGULAR:
            members.append((name, view[start : start + size]))
        elif kind != _DIRECTORY:
            return None
        offset = start + (size + _BLOCK - 1) // _BLOCK * _BLOCK


def _tarfile_members(data: bytes, shard: str) -> list[tuple[str, memoryview]]:
    view = memoryview(data)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            return [(m.name, view[m.offset_data : m.offset_data + m.size]) for m in archive if m.isreg()]
    except tarfile.TarError as err:
        raise ShardError(shard, None, f"not a readable tar archive ({err})") from err


def split_name(name: str) -> tuple[str | None, str | None]:
    """(sample key, extension), as WebDataset's `base_plus_ext` gives them: the key runs to the
    first dot of the file name, directories included. Ordinary names skip its regular expression
    (3 µs per member); odd ones (no dot, or a leading dot) go through it."""
    start = name.rfind("/") + 1
    dot = name.find(".", start)
    if dot > start:
        return name[:dot], name[dot + 1 :]
    from webdataset.tariterators import base_plus_ext  # here, not with the module: webdataset imports torch (~1.5 s)

    return base_plus_ext(name)


def _key_of(name: str) -> str:
    return split_name(name)[0] or name


def iter_samples(data: bytes, shard: str, schema_version: int = schema.SCHEMA_VERSION) -> Iterator[tuple[str, dict[str, memoryview]]]:
    """(key, {extension: bytes}) per sample, e.g. ("0000000012", {"node_feat.npy": ..., "meta.json": ...}).

    The whole archive is checked for truncation before the first sample is yielded, so a
    truncated shard fails as a unit. Extensions are lower-cased, as WebDataset does. Members of a
    shard of an older `schema_version` (its manifest's) get their current names here
    (schema.renamed_members: x.npy → node_feat.npy, …): the one place that applies the old names."""
    members = _ustar_members(data, shard)
    if members is None:
        members = _tarfile_members(data, shard)
    renamed = schema.renamed_members(schema_version)
    key, fields = None, {}
    for name, payload in members:
        base, ext = split_name(name)
        if base is None or base.rsplit("/", 1)[-1].startswith("__"):
            continue  # not a sample member (WebDataset skips these too)
        ext = ext.lower()
        if ext.rsplit(".", 1)[-1] in PICKLE_EXTENSIONS:
            raise ShardError(shard, base, f"member {name} would need unpickling; refusing to load it")
        if renamed:
            ext = renamed.get(ext, ext)
        if base != key:
            if key is not None:
                yield key, fields
            key, fields = base, {}
        if ext in fields:
            raise ShardError(shard, base, f"member {name} appears twice")
        fields[ext] = payload
    if key is not None:
        yield key, fields
