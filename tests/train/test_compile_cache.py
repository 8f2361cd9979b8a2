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
