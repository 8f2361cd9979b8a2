"""The inductor cache holds code that runs when loaded: gtscale uses a cache directory only when
nobody but you (or root) could have written it. A crafted cache file in a directory others can
write is never loaded; a private one is used."""

import os
import pickle

import pytest
import torch

from gtscale.errors import UserError
from gtscale.train.compiled import compile_options, reset_compile_state, use_cache_dir


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_a_cache_dir_others_can_write_is_refused_and_nothing_in_it_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = tmp_path / "shared-cache"
    (cache / "fxgraph").mkdir(parents=True)
    (cache / "fxgraph" / "entry").write_bytes(pickle.dumps(_Payload()))
    cache.chmod(0o777)
    with pytest.raises(UserError, match="writable by others"):
        use_cache_dir(cache)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(cache)
    assert not (tmp_path / "PWNED").exists()


def test_a_group_writable_parent_is_refused_too(tmp_path):
    parent = tmp_path / "group"
    parent.mkdir()
    parent.chmod(0o775)
    with pytest.raises(UserError, match=f"{parent} is writable by others"):
        use_cache_dir(parent / "cache")


@pytest.mark.slow
def test_a_private_cache_dir_is_created_0700_and_used(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache = use_cache_dir(tmp_path / "private" / "inductor")
    assert cache.stat().st_mode & 0o777 == 0o700
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache)
    reset_compile_state()
    f = torch.compile(lambda x: torch.sin(x) * 2, **compile_options("default", static_shapes=True))
    torch.testing.assert_close(f(torch.ones(3)), torch.sin(torch.ones(3)) * 2)
    assert any(cache.rglob("*.py")) or any(cache.rglob("*.cpp")) or any(cache.rglob("*.so"))  # inductor wrote its code here


@pytest.mark.parametrize("entry", ["folder", "file", "link"])
def test_an_entry_others_can_write_inside_a_private_cache_is_refused(tmp_path, monkeypatch, entry):
    """Only the cache folder and those above it were checked: a world-writable subfolder (or file)
    inside a private cache, or a link out of it, was used, and inductor loads code from there."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "fxgraph").mkdir()
    if entry == "folder":
        (cache / "fxgraph").chmod(0o777)
        bad = cache / "fxgraph"
    elif entry == "file":
        bad = cache / "fxgraph" / "entry"
        bad.write_bytes(pickle.dumps(_Payload()))
        bad.chmod(0o666)
    else:
        (tmp_path / "shared").mkdir()
        bad = cache / "fxgraph" / "entry"
        bad.symlink_to(tmp_path / "shared" / "entry")
    with pytest.raises(UserError, match=f"{bad} is (writable by others|a symbolic link out of it)"):
        use_cache_dir(cache)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(cache)
    assert not (tmp_path / "PWNED").exists()


def test_entries_you_wrote_with_a_group_umask_are_accepted(tmp_path, monkeypatch):
    """A umask of 002 leaves your files writable by your own primary group: still private."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    (cache / "fxgraph").mkdir(parents=True)
    cache.chmod(0o700)
    (cache / "fxgraph").chmod(0o775)
    os.chown(cache / "fxgraph", os.getuid(), os.getgid())
    (cache / "fxgraph" / "inside").symlink_to(cache / "fxgraph")
    assert use_cache_dir(cache) == cache
