"""Fan-out neighbourhoods of target nodes, sampled from a store's CSR with vectorised numpy (no
loop over nodes in Python: one pass per hop over arrays of every frontier node of the batch).

Each target gets its own tree of nodes, grown hop by hop: at hop h every node that joined the tree
at hop h − 1 samples `fanouts[h]` of its stored neighbours uniformly without replacement (all of
them when it has fewer). A sampled node already in the tree (the target itself, seen again from a
neighbour, or a node two parents share) is not added twice: the edge joins the existing node, and
only nodes new to the tree sample at the next hop (PyG's NeighborLoader does the same within a
subgraph). The edges are the sampled ones, each in both directions (the stored graph is
symmetric) and once: a pair sampled from both ends is one edge.

Trees are kept apart, one graph per target (nodes two trees share appear in both): a target's
neighbourhood then does not depend on which other targets share its batch, and models that attend
within a graph (MNA-GT) attend within one target's neighbourhood.

Sampling without replacement is Floyd's algorithm run on all frontier nodes of more than k
neighbours at once: for j = d − k … d − 1, draw t uniform in [0, j], keep t unless already kept,
else keep j. It draws exactly k distinct positions with every k-subset equally likely, in k
vectorised rounds whatever the degrees (a hub costs what a leaf costs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Neighbourhoods:
    """The trees of a batch of targets, concatenated tree by tree."""

    nodes: np.ndarray  # int64 [M] global ids; tree t is nodes[tree == t], its target first
    tree: np.ndarray  # int64 [M] which target's tree each node is in (non-decreasing)
    edge_index: np.ndarray  # int64 [2, E] positions in `nodes`: every sampled edge, both directions, once
    roots: np.ndarray  # int64 [T] the position of each target in `nodes`


def sample_positions(indptr: np.ndarray, rows: np.ndarray, fanout: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(which entry of `rows` sampled it, position in `indices`) of `fanout` neighbours of every
    row, without replacement, or all of a row's when it has no more than `fanout`."""
    start = np.asarray(indptr[rows], np.int64)
    degree = np.asarray(indptr[rows + 1], np.int64) - start
    few = np.flatnonzero(degree <= fanout)
    counts = degree[few]
    firsts = np.cumsum(counts) - counts
    parent_all = np.repeat(few, counts)
    position_all = np.repeat(start[few] - firsts, counts) + np.arange(int(counts.sum()))
    many = np.flatnonzero(degree > fanout)
    chosen = np.empty((fanout, len(many)), np.int64)  # round by round: each round's check reads whole rows
    if len(many):
        top = degree[many] - fanout  # Floyd: round j may take any of 0..top+j
        for j in range(fanout):
            t = rng.integers(0, top + j + 1)
            taken = (chosen[:j] == t).any(axis=0)
            chosen[j] = np.where(taken, top + j, t)
    parent = np.concatenate([parent_all, np.repeat(many, fanout)])
    position = np.concatenate([position_all, (start[many, None] + chosen.T).ravel()])
    return parent, position


def sample_neighbourhoods(indptr: np.ndarray, indices: np.ndarray, targets: np.ndarray, fanouts, rng: np.random.Generator) -> Neighbourhoods:
    """The fan-out trees of `targets` (see the module docstring); `rng` draws every choice.

    A node of tree t is the key t·N + node id; the keys of the nodes so far are kept sorted
    (`known`, with their positions in order of joining), so that a hop's samples are told apart
    from the tree's earlier nodes by one sort and one binary search, each sample's node is read
    off its key's run in that sort, and the new keys, sorted by that same sort, merge into `known`
    without another (numpy's hashing np.unique is ten times slower than a sort on such keys). Stable sorts throughout: samples come in runs of one tree,
    which numpy's stable sort (timsort) takes in about half its quicksort's time."""
    indptr, indices = np.asarray(indptr), np.asarray(indices)  # plain arrays over the memory maps: fancy indexing 5× faster
    num_nodes = len(indptr) - 1
    targets = np.asarray(targets, np.int64)
    count = len(targets)
    node_of, tree_of = [targets], [np.arange(count, dtype=np.int64)]
    keys = tree_of[0] * num_nodes + targets
    order = np.argsort(keys, kind="stable")
    known, known_pos = keys[order], order
    frontier, frontier_tree, frontier_pos = targets, tree_of[0], tree_of[0]
    parents, children = [], []
    for hop, fanout in enumerate(fanouts):
        parent, position = sample_positions(indptr, frontier, int(fanout), rng)
        node = np.asarray(indices[position], np.int64)
        tree = frontier_tree[parent]
        key = tree * num_nodes + node
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        first = np.ones(len(key), bool)  # the first sample of each distinct key, in sorted order
        first[1:] = ordered[1:] != ordered[:-1]
        at = np.searchsorted(known, ordered)
        seen = at < len(known)
        seen[seen] = known[at[seen]] == ordered[seen]
        adds = first & ~seen  # in sorted order, the samples that add a node
        is_new = np.zeros(len(key), bool)
        is_new[order[adds]] = True
        new_first = np.flatnonzero(is_new)  # in the order they were drawn, which numbers the new nodes
        node_of.append(node[new_first])
        tree_of.append(tree[new_first])
        new_pos = count + np.cumsum(is_new) - 1  # each sample's node number, where it adds one
        # each sample's node: its key's run in sorted order is one node, known or added by the run's first sample
        heads = np.flatnonzero(first)
        head_node = np.where(seen[heads], known_pos[np.minimum(at[heads], len(known) - 1)], new_pos[order[heads]])
        child = np.empty(len(key), np.int64)
        child[order] = np.repeat(head_node, np.diff(np.append(heads, len(key))))
        if hop + 1 < len(fanouts):  # the last hop's keys are looked up no more
            merge_at = at[adds]  # the new keys, sorted, merge into the sorted known keys there
            known, known_pos = np.insert(known, merge_at, ordered[adds]), np.insert(known_pos, merge_at, new_pos[order[adds]])
        count += len(new_first)
        parents.append(frontier_pos[parent])
        children.append(child)
        frontier, frontier_tree, frontier_pos = node[new_first], tree[new_first], new_pos[new_first]
    nodes, trees = np.concatenate(node_of), np.concatenate(tree_of)
    by_tree = np.argsort(trees, kind="stable")  # each tree's nodes together, in the order they joined
    renumber = np.empty(count, np.int64)
    renumber[by_tree] = np.arange(count)
    a = renumber[np.concatenate(parents)] if parents else np.zeros(0, np.int64)
    b = renumber[np.concatenate(children)] if children else np.zeros(0, np.int64)
    pairs = np.sort(np.minimum(a, b) * count + np.maximum(a, b), kind="stable")
    pairs = pairs[np.concatenate([[True], pairs[1:] != pairs[:-1]])]
    low, high = pairs // count, pairs % count
    edge_index = np.stack([np.concatenate([low, high]), np.concatenate([high, low])])
    return Neighbourhoods(nodes[by_tree], trees[by_tree], edge_index, renumber[: len(targets)])
