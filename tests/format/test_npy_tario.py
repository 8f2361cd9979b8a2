import io
import pickle
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gtscale.format.npy import UnsafeArrayError, decode_npy, encode_npy
from gtscale.format.tario import iter_shard, write_shard

DTYPES = st.sampled_from([np.uint8, np.int16, np.int32, np.uint16, np.float16, np.float32, np.int64, np.bool_])


@settings(max_examples=80, deadline=None)
@given(DTYPES.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))))
def test_encode_npy_equals_np_save(array):
    buf = io.BytesIO()
    np.save(buf, array)
    assert encode_npy(array) == buf.getvalue()
    assert np.array_equal(decode_npy(encode_npy(array)), array, equal_nan=array.dtype.kind == "f")


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(ValueError):
        encode_npy(np.array([{"a": 1}], dtype=object))
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsafeArrayError):
        decode_npy(buf.getvalue(), "node_feat.npy")


def test_shard_roundtrip_and_determinism(tmp_path):
    records = [(f"{i:010d}", {"node_feat": np.arange(i + 1, dtype=np.uint8), "meta": {"idx": i}}) for i in range(5)]
    a = write_shard(tmp_path / "a.tar", records)
    b = write_shard(tmp_path / "b.tar", records)
    assert a == b and a["samples"] == 5
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert not list(tmp_path.glob("*.tmp"))
    back = list(iter_shard(tmp_path / "a.tar"))
    assert [k for k, _ in back] == [k for k, _ in records]
    assert np.array_equal(back[3][1]["node_feat"], np.arange(4)) and back[3][1]["meta"] == {"idx": 3}
    with tarfile.open(tmp_path / "a.tar") as tar:
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in tar.getmembers()} == {(0, 0, 0, "")}


def _tar_with(path, name, data):
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_a_shard_holding_a_pickle_is_refused(tmp_path):
    payload = pickle.dumps({"boom": 1})
    _tar_with(tmp_path / "p.tar", "0000000001.y.pickle", payload)
    from gtscale.format.shardfile import ShardError

    with pytest.raises(ShardError, match="unpickling"):
        list(iter_shard(tmp_path / "p.tar"))
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    _tar_with(tmp_path / "o.tar", "0000000001.node_feat.npy", buf.getvalue())
    with pytest.raises(UnsafeArrayError):
        list(iter_shard(tmp_path / "o.tar"))


def test_shards_are_byte_identical_to_pythons_tarfile(tmp_path):
    """The template-patched headers must equal tarfile's own output, member for member."""
    rng = np.random.default_rng(0)
    records = [
        (f"{i:010d}", {"node_feat": rng.integers(0, 9, size=(int(rng.integers(0, 40)), 9), dtype=np.uint8), "spd": np.zeros((i, i), np.uint8), "meta": {"idx": i}})
        for i in range(30)
    ]
    write_shard(tmp_path / "fast.tar", records)
    from gtscale.format.tario import sample_members

    with tarfile.open(tmp_path / "ref.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, record in records:
            for suffix, data in sample_members(record):
                info = tarfile.TarInfo(f"{key}.{suffix}")
                info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o444, 0, 0, "", ""
                tar.addfile(info, io.BytesIO(data))
    assert (tmp_path / "fast.tar").read_bytes() == (tmp_path / "ref.tar").read_bytes()


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="0123456789_abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=40),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=40),
    st.integers(0, 8**11 - 1),
)
def test_ustar_header_equals_tarfile(key, suffix, size):
    from gtscale.format.tario import ustar_header

    name = f"{key}.{suffix}"
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = size, 0, 0o444, 0, 0, "", ""
    expected = info.tobuf(format=tarfile.USTAR_FORMAT) if len(name) <= 100 else None
    if expected is None:
        with pytest.raises(ValueError):
            ustar_header(name, size)
    else:
        assert ustar_header(name, size) == expected
