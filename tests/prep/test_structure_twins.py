"""The SVD encoding's twin-reduced eigenproblem against the plain eigh of A+I it replaces.

Where the reduction applies (twins make the problem at least twice smaller, the kept pairs stay
above A's null space), the encoding must equal the eigh path's to float16 precision, up to the
sign of a pair (LAPACK's eigenvector signs are arbitrary; the loader flips pairs at random), with
the same convention V = U·sign(λ). Everywhere else the eigh path's bytes must come out unchanged.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtscale.prep.structure import _svd_encodings, _twin_classes, _twin_reduced_svd_encodings, twins_halve

RANK = 8


def ego_like(rng, n=64, hop1=16, extra_edges=0):
    """A target, `hop1` first-hop nodes and leaves hung off the first few of them until n nodes
    (what fan-out caps make), plus random extra edges among all nodes."""
    adj = np.zeros((n, n))
    adj[0, 1 : hop1 + 1] = 1
    parents = np.repeat(np.arange(1, hop1 + 1), rng.integers(1, 17, hop1))[: n - hop1 - 1]
    adj[parents, np.arange(hop1 + 1, hop1 + 1 + len(parents))] = 1
    for _ in range(extra_edges):
        i, j = rng.choice(n, 2, replace=False)
        adj[i, j] = 1
    return np.maximum(adj, adj.T)


def separated(adj, keep, gap=1e-3):
    """The top `keep` eigenvalues of A+I by magnitude are simple and apart from the next one."""
    mags = np.sort(np.abs(np.linalg.eigvalsh(adj + np.eye(len(adj)))))[::-1][: keep + 1]
    return bool(np.all(-np.diff(mags) > gap))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(0.0, 0.3))
def test_twin_classes_group_identical_rows_numbered_by_first_node(n, seed, density):
    rng = np.random.default_rng(seed)
    adj = rng.random((n, n)) < density
    adj = np.triu(adj, 1)
    adj = (adj | adj.T).astype(np.float64)
    if n > 4:  # make some twins for sure
        adj[n - 1], adj[:, n - 1] = adj[n - 2], adj[n - 2]
        adj[n - 1, n - 1] = adj[n - 2, n - 2] = 0
    cls = np.empty(n, np.int64)
    count = _twin_classes(adj, cls)
    first_of = {}
    expected = [first_of.setdefault(row.tobytes(), len(first_of)) for row in adj]
    assert cls.tolist() == expected and count == len(first_of)


def test_reduced_encoding_equals_eigh_path_on_ego_subgraphs():
    rng = np.random.default_rng(0)
    adj = np.stack([ego_like(rng, extra_edges=rng.integers(0, 12)) for _ in range(150)])
    old = _svd_encodings(adj, RANK, reduce_twins=False).astype(np.float64)
    new = _svd_encodings(adj, RANK).astype(np.float64)
    reduced = _twin_reduced_svd_encodings(adj, RANK, np.zeros((len(adj), 64, 2 * RANK)))
    assert reduced.mean() > 0.9  # the fast path is what ego subgraphs take
    checked = 0
    for j in np.flatnonzero(reduced):
        # σ: the column norms² of U√Σ, as in the eigh path, pair by pair
        np.testing.assert_allclose((new[j, :, :RANK] ** 2).sum(0), (old[j, :, :RANK] ** 2).sum(0), atol=2e-2)
        sign_of_lambda = np.sign((new[j, :, :RANK] * new[j, :, RANK:]).sum(0))  # V = U·sign(λ)
        np.testing.assert_array_equal(new[j, :, RANK:], new[j, :, :RANK] * sign_of_lambda)
        if separated(adj[j], RANK):
            flip = np.sign((old[j, :, :RANK] * new[j, :, :RANK]).sum(0))
            np.testing.assert_allclose(new[j] * np.concatenate([flip, flip]), old[j], atol=4e-3, rtol=0)
            checked += 1
    assert checked > 100


def test_reduced_encoding_reconstructs_the_kept_part_of_a_plus_i():
    """Against float64 eigh: (U√Σ)(V√Σ)ᵀ is A+I's best rank-r part, whatever the basis chosen in a
    repeated eigenvalue (the kernel's output is float64 before the float16 rounding)."""
    rng = np.random.default_rng(1)
    adj = np.stack([ego_like(rng, n=40, hop1=10, extra_edges=3) for _ in range(30)])
    out = np.zeros((len(adj), 40, 2 * RANK))
    ok = _twin_reduced_svd_encodings(adj, RANK, out)
    assert ok.all()
    checked = 0
    for a, enc in zip(adj, out):
        lam, q = np.linalg.eigh(a + np.eye(40))
        order = np.argsort(-np.abs(lam), kind="stable")
        if abs(lam[order[RANK - 1]]) - abs(lam[order[RANK]]) < 1e-6:
            continue  # the rank-r part is unique only when the cut falls in a gap
        top = order[:RANK]
        np.testing.assert_allclose(enc[:, :RANK] @ enc[:, RANK:].T, (q[:, top] * lam[top]) @ q[:, top].T, atol=1e-9)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("case", ["no twins", "null space reached", "fewer nodes than r"])
def test_graphs_the_reduction_leaves_get_the_eigh_path_bytes(case):
    if case == "no twins":  # a path: every row differs
        n = 30
        adj = np.eye(n, k=1) + np.eye(n, k=-1)
    elif case == "null space reached":  # a star: one nonzero pair of A, the rest eigenvalue 1 of A+I
        n = 20
        adj = np.zeros((n, n))
        adj[0, 1:] = adj[1:, 0] = 1
    else:
        n = 5
        adj = np.zeros((n, n))
        adj[0, 1:] = adj[1:, 0] = 1
    batch = np.stack([adj, adj])
    assert not _twin_reduced_svd_encodings(batch, RANK, np.zeros((2, n, 2 * RANK))).any()
    assert _svd_encodings(batch, RANK).tobytes() == _svd_encodings(batch, RANK, reduce_twins=False).tobytes()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(0.0, 0.5), st.integers(0, 20))
def test_twins_halve_is_the_condition_the_twin_kernel_checks(n, seed, density, leaves):
    """The numpy pre-check that keeps molecules off the twin kernel decides as the kernel would."""
    rng = np.random.default_rng(seed)
    adj = np.triu(rng.random((n, n)) < density, 1)
    adj[0, n - min(leaves, n - 1):] = True  # leaves hung off node 0: twins
    adj = np.triu(adj, 1)
    adj = adj | adj.T
    cls = np.empty(n, np.int64)
    assert twins_halve(adj[None])[0] == (2 * _twin_classes(adj.astype(np.float64), cls) <= n)
