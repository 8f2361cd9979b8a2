"""Compiled kernels of the out-of-core CSR build: scatter edge blocks into rows (a counting sort),
then sort and deduplicate every row in place, then compact the rows into the final array."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def scatter_symmetric(src, dst, bits, fill, indices, relations, typed):
    """Write each edge u–v (self-loops already dropped) into row u and row v at fill[row]++."""
    for t in range(src.shape[0]):
        u, v = src[t], dst[t]
        indices[fill[u]] = v
        indices[fill[v]] = u
        if typed:
            relations[fill[u]] = bits[t]
            relations[fill[v]] = bits[t]
        fill[u] += 1
        fill[v] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def dedupe_rows(indptr, indices, relations, typed, new_degree):
    """Sort each row's neighbours, drop repeats (OR-ing their relation bits), keep the unique ones at
    the row's start; new_degree[u] = how many. Rows are independent: parallel over rows."""
    for u in numba.prange(indptr.shape[0] - 1):
        a, b = indptr[u], indptr[u + 1]
        if b - a == 0:
            new_degree[u] = 0
            continue
        if typed:
            keys = indices[a:b].astype(np.int64) * 256 + relations[a:b].astype(np.int64)
            keys.sort()
            w = a - 1
            for k in range(keys.shape[0]):
                v, bit = keys[k] // 256, keys[k] % 256
                if w >= a and indices[w] == v:
                    relations[w] |= bit
                else:
                    w += 1
                    indices[w] = v
                    relations[w] = bit
        else:
            indices[a:b].sort()
            w = a
            for k in range(a + 1, b):
                if indices[k] != indices[w]:
                    w += 1
                    indices[w] = indices[k]
        new_degree[u] = w - a + 1


@numba.njit(cache=True, nogil=True, parallel=True)
def compact_rows(raw_indptr, raw, new_indptr, out):
    for u in numba.prange(new_indptr.shape[0] - 1):
        a, n = raw_indptr[u], new_indptr[u + 1] - new_indptr[u]
        out[new_indptr[u] : new_indptr[u] + n] = raw[a : a + n]
