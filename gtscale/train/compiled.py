"""torch.compile of the task model, and the one cache directory gtscale lets it use.

The model is compiled whole (fullgraph: a graph break is an error, never a silent eager
fallback). Models read only tensors, with every size fixed by the batch's shapes (packing
indices come with the batch: models/packing.py), so a run compiles once per distinct shape
family: with data.loader.pad_to_bucket, at most once per size bucket (dynamic=False, one
specialised graph per bucket, which CUDA graphs need); without it, dynamo's automatic dynamic
shapes make a second compile general enough for every later batch.

Trust. Inductor's cache holds generated C++/Triton code and pickled graphs that run when they are
loaded, so a cache is code. gtscale points inductor (and Triton) at `compile.cache_dir` only when
that directory, and every directory above it, could only have been written by you or root: owned
by you (or root for the ancestors) and not writable by group or others (a sticky, world-writable
ancestor such as /tmp is fine, as its entries cannot be replaced by others), and everything
inside it, which is what gets loaded, too: owned by you (or root), writable by nobody else (by
group only where the group is your own primary group, as a umask of 002 leaves what you write),
and no symbolic link out of it. Torch's default, /tmp/torchinductor_<user>, is a name anyone on
the machine can create first; a run directory or a shard folder is something people copy and hand
each other, and a cache copied from elsewhere or once left open keeps entries others wrote. A
directory that fails the check is refused in one line, before anything is loaded from it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import torch

from gtscale.errors import UserError

#: Compiled graphs allowed per function: bucket shapes × 2 (training and evaluation mode).
RECOMPILE_LIMIT = 512

#: Environment variables through which inductor and Triton find their caches.
_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def private_cache_dir(path: str | Path) -> Path:
    """`path` (created with mode 0700 when missing), after checking that only you or root could
    have put anything in it; a UserError naming the offending directory otherwise."""
    cache = Path(path).expanduser().absolute()
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"compile.cache_dir {cache}: cannot be created ({err.strerror})") from None
    uid = os.getuid()
    for directory in (cache, *cache.parents):
        info = directory.lstat()
        if stat.S_ISLNK(info.st_mode):
            raise UserError(f"compile.cache_dir {cache}: {directory} is a symbolic link; give the cache a real, private directory")
        owner_ok = info.st_uid == uid or (directory != cache and info.st_uid == 0)
        writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        shared_but_sticky = directory != cache and info.st_mode & stat.S_ISVTX
        if not owner_ok or (writable_by_others and not shared_but_sticky):
            raise UserError(
                f"compile.cache_dir {cache}: {directory} is {'owned by uid ' + str(info.st_uid) if not owner_ok else 'writable by others'}; "
                "compiled code is loaded from it, so it must be private to you (chmod go-w, or choose another compile.cache_dir)"
            )
    check_cache_contents(cache, uid)
    return cache


def check_cache_contents(cache: Path, uid: int) -> None:
    """Every folder and file below `cache` is yours (or root's) and writable by nobody else, and
    every link stays inside it (module docstring); a UserError naming the first that is not."""
    inside = cache.resolve()
    for folder, dirs, files in os.walk(cache):
        for name in (*dirs, *files):
            path = Path(folder) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                problem = None if path.resolve().is_relative_to(inside) else f"a symbolic link out of it (to {path.resolve()})"
            elif info.st_uid not in (uid, 0):
                problem = f"owned by uid {info.st_uid}"
            elif info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and info.st_gid != os.getgid()):
                problem = "writable by others"
            else:
                problem = None
            if problem:
                raise UserError(f"compile.cache_dir {cache}: {path} is {problem}; compiled code is loaded from it, so everything in it "
                                "must be private to you (chmod -R go-w, remove the entry, or choose another compile.cache_dir)")


def use_cache_dir(path: str | Path) -> Path:
    """Send inductor's and Triton's caches to the checked private directory `path`."""
    cache = private_cache_dir(path)
    os.environ[_CACHE_ENV[0]] = str(cache)
    os.environ[_CACHE_ENV[1]] = str(cache / "triton")
    return cache


def compile_model(model: torch.nn.Module, cfg, static_shapes: bool) -> None:
    """Compile `model`'s forward in place (cfg: the training config's `compile` section).

    The forward, not the module call: DeepSpeed hooks the module's call (timers, ZeRO's prologue),
    which has no place in a model graph and would break it; ZeRO-3's per-submodule parameter hooks
    would too, so the config refuses compile with stage 3."""
    prepare_inductor(cfg.cache_dir, next(model.parameters()).device.type)
    model.forward = torch.compile(model.forward, **compile_options(cfg.mode, static_shapes))


def prepare_inductor(cache_dir: str | Path, device_type: str) -> None:
    """What every gtscale compile sets first (training and `gtscale bench model --compile`): the
    private cache, recompile limits sized for one graph per bucket, and the code generation
    settings for the model's device (apply_codegen_settings)."""
    use_cache_dir(cache_dir)
    # One graph per bucket shape (and per train / eval mode) is the design, not a runaway: dynamo's
    # default limit of 8 recompiles per function would fail a fullgraph run with more buckets.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, RECOMPILE_LIMIT)
    apply_codegen_settings(device_type)


def apply_codegen_settings(device_type: str) -> None:
    """Random draws on a CPU: inductor's generated C++ draws dropout masks with one Philox call per
    random word, which cost 17-20 ms of a compiled egt-small step against 13 ms for the same words
    from torch's generator (mt19937) as eager draws them; `fallback_random` makes the compiled
    model call torch's, so that it also draws exactly eager's masks. On a GPU inductor's fused
    Philox draws are the faster ones and stay.

    The vector width is inductor's own (512 bits on AVX-512 CPUs). Forcing 256-bit (AVX2) kernels
    there, as gtscale did from 193a8fd to work around a heap corruption in Graphormer's compiled
    backward seen once on an AVX-512 Xeon with two threads, made inductor compute wrong values:
    on this AVX-512 EPYC, EGT with node dropout gave the last graph of a batch outputs 0.04 off
    eager's, at one and two threads, and at one thread its pair scatter failed a bounds check. At
    inductor's width every model matches eager at one and two threads here
    (tests/models/test_compiled.py runs both)."""
    torch._inductor.config.fallback_random = device_type == "cpu"


def compile_options(mode: str, static_shapes: bool) -> dict:
    """torch.compile keyword arguments for a model step (see the module docstring)."""
    return {"fullgraph": True, "mode": mode, "dynamic": False if static_shapes else None}


def compile_count() -> int:
    """Graphs dynamo has compiled in this process (its frame counter); tests and logs read it."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_stats() -> dict[str, int]:
    """Compiled graphs, and inductor's cache hits and misses in this process (a resumed or later
    run on the same cache_dir compiles from the cache: hits, no misses)."""
    from torch._dynamo.utils import counters

    return {"compiled_graphs": compile_count(), "compile_cache_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
            "compile_cache_misses": int(counters["inductor"]["fxgraph_cache_miss"])}


def reset_compile_state() -> None:
    """Forget compiled graphs and counters (between independent compilations in one process)."""
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
