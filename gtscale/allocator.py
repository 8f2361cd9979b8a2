"""glibc's malloc told to keep the memory a CPU training step frees, for the next step to reuse.

Why: a CPU step allocates and frees the same tensors of a few MiB every step (attention maps,
activations, gradients). By default glibc gives freed memory at the top of its heap back to the
kernel (trimming) and serves blocks above its mmap threshold with fresh mappings, so the next step
writes into new pages and takes a page fault for every 4 KiB of them: an eager egt-small step at
batch 32 took 16-37 thousand minor faults (65-150 MiB of pages touched anew) and ran 10-17 %
slower than with the thresholds raised (~400 faults; docs/speed.md, "Freed memory kept, weight
gradients in place"). The time showed up as `aten::copy_` and `aten::_to_copy` in the profiles:
each fresh output paid for its pages.

PyTorch's CPU tuning guide gives the same advice (or an allocator such as jemalloc preloaded);
glibc's own switches need nothing installed. Raised here, in the gtscale process (mallopt) and, as
environment variables, in every process it starts (loader workers, benchmark rows, ranks started by
a launcher from this environment). Blocks above 32 MiB, glibc's largest mmap threshold, are still
mapped fresh. A user's own MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or glibc.malloc tunables
are left as they are, and so is any process not on glibc. `GTSCALE_MALLOC=default` keeps glibc's
defaults: the A/B switch for benchmarks.

The cost: a process's resident memory no longer shrinks after its peak, which for a training or
benchmark process is its working set anyway.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks up to this size
#: come from the heap and are reused there.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Trim the heap's top only when this much of it is free (mallopt takes a C int: 2 GiB − 1).
TRIM_THRESHOLD = 2**31 - 1

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_VARIABLES = {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "MALLOC_TRIM_THRESHOLD_": TRIM_THRESHOLD}


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds in this process and in the processes it starts.
    False (and nothing changed) off glibc, or where the user already chose malloc settings."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    users_choice = any(name in os.environ for name in _VARIABLES) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")
    if users_choice or os.environ.get("GTSCALE_MALLOC") == "default":
        return False
    libc = ctypes.CDLL(None)  # the process's own C library (glibc, checked above)
    if not (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return False
    os.environ.update({name: str(value) for name, value in _VARIABLES.items()})
    return True
