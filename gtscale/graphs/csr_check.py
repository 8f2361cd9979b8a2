"""What the compiled samplers rely on in a CSR, checked before any of them reads it.

numba kernels do not bounds-check: an index past the end of `local` or a row pointer past the end
of `indices` reads (or writes) foreign memory and kills the process with SIGSEGV, leaving partial
output behind. So every CSR that reaches a kernel has passed `check_csr`:

- indptr: int64 [N+1], indptr[0] = 0, never decreasing, indptr[N] = len(indices);
- indices: int32, each row strictly increasing (sorted, no repeats; a repeated neighbour would be
  counted twice in the edges-among scan, overrunning its [n, n] scratch) and within 0..N−1.

The row check is one compiled pass over `indices`, after the indptr checks have made every row's
bounds safe to read. It runs serially: the pass is bound by memory (0.14 CPU s over T-Social's
146 M entries either way), and numba's parallel kernels run on OpenMP, whose first launch sets the
OpenMP thread count to numba's (every core) in the process's one OpenMP runtime, which torch shares:
a training process started with OMP_NUM_THREADS=1 then ran torch on every core, and on a busy
2-core machine its fan-out steps took 7× the CPU time.

`require_checked` is the kernels' gate. A store's arrays are memory-mapped read-only and checked
when the store opens (graphs/store.py), so the gate finds them in its list and costs nothing;
other (writable) arrays are checked on every call.
"""

from __future__ import annotations

import weakref

import numba
import numpy as np

from gtscale.errors import UserError

@numba.njit(cache=True, nogil=True)
def _first_bad_row(indptr, indices, num_nodes):
    """The first row holding an id outside 0..num_nodes−1 or not above its predecessor; −1 if none."""
    for u in range(indptr.shape[0] - 1):
        prev = -1
        for k in range(indptr[u], indptr[u + 1]):
            v = indices[k]
            if v <= prev or v >= num_nodes:
                return u
            prev = v
    return -1


def check_csr(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, indptr_file="indptr", indices_file="indices") -> None:
    """Raise UserError (one line naming the file and the first bad entry) unless the CSR holds what
    the kernels rely on (see the module docstring)."""
    def bad(file, what: str):
        raise UserError(f"{file}: {what} (the graph store is corrupt; rebuild it with `gtscale graph build`)")

    if indptr.dtype != np.int64 or indptr.shape != (num_nodes + 1,):
        bad(indptr_file, f"{indptr.dtype} {list(indptr.shape)}; expected int64 [{num_nodes + 1}] (nodes + 1)")
    if indices.dtype != np.int32 or indices.ndim != 1:
        bad(indices_file, f"{indices.dtype} {list(indices.shape)}; expected int32 [nnz]")
    if indptr[0] != 0:
        bad(indptr_file, f"entry 0 is {int(indptr[0])}; expected 0")
    if indptr[-1] != len(indices):
        bad(indptr_file, f"last entry is {int(indptr[-1])}, but {indices_file} holds {len(indices)} entries")
    falls = np.flatnonzero(np.diff(indptr) < 0)
    if len(falls):
        bad(indptr_file, f"decreases at entry {int(falls[0]) + 1} ({int(indptr[falls[0]])} → {int(indptr[falls[0] + 1])})")
    row = int(_first_bad_row(indptr, indices, num_nodes))
    if row >= 0:
        ids = indices[indptr[row] : indptr[row + 1]].astype(np.int64)
        outside = ids[(ids < 0) | (ids >= num_nodes)]
        what = (f"node id {int(outside[0])} outside 0..{num_nodes - 1}" if len(outside)
                else "neighbours not strictly increasing (unsorted or repeated)")
        bad(indices_file, f"row {row} (entries {int(indptr[row])}..{int(indptr[row + 1]) - 1}) holds {what}")


#: id(indices) → weak references to the (indptr, indices) pair checked together. Only read-only
#: arrays are listed: nothing can change them after the check.
_CHECKED: dict[int, tuple[weakref.ref, weakref.ref]] = {}


def mark_checked(indptr: np.ndarray, indices: np.ndarray) -> None:
    if not indptr.flags.writeable and not indices.flags.writeable:
        _CHECKED[id(indices)] = (weakref.ref(indptr), weakref.ref(indices, lambda _, key=id(indices): _CHECKED.pop(key, None)))


def require_checked(indptr: np.ndarray, indices: np.ndarray) -> None:
    """The gate in front of every kernel that walks a CSR: a pair checked before passes at once,
    any other pair is checked now."""
    pair = _CHECKED.get(id(indices))
    if pair is not None and pair[0]() is indptr and pair[1]() is indices:
        return
    check_csr(np.asarray(indptr), np.asarray(indices), len(indptr) - 1)
    mark_checked(indptr, indices)
