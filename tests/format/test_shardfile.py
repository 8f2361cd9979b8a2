"""Shard reading: same samples as WebDataset's reader, and every kind of damage named precisely."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given
from hypothesis import strategies as st
from webdataset.tariterators import base_plus_ext

from gtscale.format.shardfile import ShardError, iter_samples, manifest_shards, read_shard, split_name
from gtscale.format.npy import encode_npy
from gtscale.format.tario import write_shard


def _entries(root, split="valid"):
    return manifest_shards(json.loads((root / "manifest.json").read_text()) | {"_dir": str(root)}, split)


def test_samples_match_webdataset_reader(nci_shards):
    entry = _entries(nci_shards)[0]
    ours = [(key, {ext: bytes(v) for ext, v in members.items()}) for key, members in iter_samples(read_shard(entry, True), entry.name)]
    theirs = [
        (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
        for s in wds.tariterators.tarfile_samples([{"url": str(entry.path)}])
    ]
    assert len(ours) == entry.samples
    assert ours == theirs


@given(st.text(alphabet="ab./_0", min_size=1, max_size=12))
def test_split_name_follows_webdataset_base_plus_ext(name):
    assert split_name(name) == base_plus_ext(name)


def test_pax_archives_are_read_through_tarfile(tmp_path):
    path = tmp_path / "pax.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in [("0000000001.node_feat.npy", encode_npy(np.ones((2, 3), np.uint8))), ("0000000001.meta.json", b'{"idx": 1}')]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = {"comment": "forces a pax header"}
            archive.addfile(info, io.BytesIO(data))
    samples = list(iter_samples(path.read_bytes(), "pax.tar"))
    assert [key for key, _ in samples] == ["0000000001"]
    assert sorted(samples[0][1]) == ["meta.json", "node_feat.npy"]


def test_checksum_and_size_mismatches_name_the_shard(nci_shards_copy):
    entry = _entries(nci_shards_copy)[1]
    data = bytearray(entry.path.read_bytes())
    data[600] ^= 0xFF  # same size, different bytes
    entry.path.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=rf"^{entry.name}: sha256 .* does not match the manifest"):
        read_shard(entry, verify=True)
    read_shard(entry, verify=False)  # without verification the bytes are returned as they are
    entry.path.write_bytes(bytes(data[:-1024]))
    with pytest.raises(ShardError, match=rf"^{entry.name}: {len(data) - 1024} bytes, the manifest says {len(data)}"):
        read_shard(entry, verify=True)
    entry.path.unlink()
    with pytest.raises(ShardError, match=rf"^{entry.name}: shard file is missing"):
        read_shard(entry, verify=True)


def test_truncation_names_the_sample_being_cut(nci_shards):
    entry = _entries(nci_shards)[0]
    data = entry.path.read_bytes()
    keys = [key for key, _ in iter_samples(data, entry.name)]
    cut = data.index(f"{keys[3]}.spd.npy".encode()) + 700  # inside sample 3's spd member
    with pytest.raises(ShardError, match=rf"^{entry.name}: sample {keys[3]}: member {keys[3]}.spd.npy is cut short"):
        list(iter_samples(data[:cut], entry.name))
    boundary = data.index(f"{keys[5]}.edge_feat.npy".encode())  # a cut exactly between two samples
    with pytest.raises(ShardError, match=rf"sample {keys[4]}: archive ends without its end-of-archive marker"):
        list(iter_samples(data[:boundary], entry.name))


def test_pickle_members_are_refused(tmp_path):
    path = tmp_path / "evil.tar"
    write_shard(path, [("0000000001", {"node_feat": np.zeros((1, 9), np.uint8), "meta": {"idx": 1}})])
    with tarfile.open(path, "a") as archive:
        info = tarfile.TarInfo("0000000002.x.pyd")
        info.size = 4
        archive.addfile(info, io.BytesIO(b"\x80\x04N."))
    with pytest.raises(ShardError, match=r"sample 0000000002: member 0000000002.x.pyd would need unpickling"):
        list(iter_samples(path.read_bytes(), "evil.tar"))


def test_a_duplicated_member_is_an_error(tmp_path):
    path = tmp_path / "dup.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
        for _ in range(2):
            info = tarfile.TarInfo("0000000001.node_feat.npy")
            payload = encode_npy(np.zeros((1, 9), np.uint8))
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    with pytest.raises(ShardError, match="sample 0000000001: member 0000000001.node_feat.npy appears twice"):
        list(iter_samples(path.read_bytes(), "dup.tar"))


@pytest.mark.parametrize("what", ["file", "split folder"])
def test_a_link_that_leaves_the_shard_folder_is_refused(nci_shards_copy, tmp_path, what):
    """A shard (or its split's folder) replaced by a link to a copy outside the shard folder: the
    checksum still matches, and it was once read as if it were the folder's own."""
    import shutil

    entry = _entries(nci_shards_copy)[0]
    outside = tmp_path / "elsewhere"
    if what == "file":
        outside.mkdir()
        shutil.move(entry.path, outside / "shard.tar")
        entry.path.symlink_to(outside / "shard.tar")
    else:
        split = entry.path.parent
        shutil.move(split, outside)
        split.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ShardError, match=rf"^{entry.name}: a symbolic link leads out of the shard folder"):
        read_shard(entry, verify=True)


def test_a_link_inside_the_shard_folder_is_read(nci_shards_copy):
    entry = _entries(nci_shards_copy)[0]
    kept = entry.path.with_name("kept.tar")
    entry.path.rename(kept)
    entry.path.symlink_to(kept.name)
    assert len(read_shard(entry, verify=True)) == entry.bytes
