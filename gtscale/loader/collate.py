"""Records → the dense, padded `Batch` models see (conventions in batch.py and schema.py).

Every tensor is filled with one scatter: the arrays of all graphs are concatenated and written
through a boolean mask (node_mask for [B, N, …] tensors, node_mask ⊗ node_mask for [B, N, N]
ones), whose row-major order of True entries is exactly the row-major order of each graph's own
array. Edges go through flat indices (b·N + u)·N + v. There is no per-graph Python loop beyond
gathering the arrays.

Node features are categorical (node_feat, molecules) or continuous (node_feat_float, sampled
subgraphs of huge graphs; node_feat is then long [B, N, 0]). A record without edge_feat gets one
edge-feature column whose only value says "an edge is here" (1 in edge_feat, 0 = no
edge): models see the adjacency through the edge tables with edge_vocab [1].

Node targets (key target_y): target_pos [B, T] is each labelled node's position in its graph,
target_id [B, T] its global node id (FILLER_IDX on padding and filler graphs), target_y and
target_y_mask its label, with T the most targets of a graph in the batch (1 for ego subgraphs).

Padding values: FEATURE_PAD (0) for categorical features and degrees, SPD_UNREACHABLE for hops,
0.0 for encodings and for unlabelled targets (whose mask is False).

Random sign flips (training only, `rng` given): an SVD triplet's left and right vectors flip
together (U√Σ and V√Σ change sign as a pair, so (U√Σ)(V√Σ)ᵀ is unchanged); every Laplacian
eigenvector flips on its own. Both are drawn per graph.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from gtscale.format import schema
from gtscale.loader.batch import Batch
from gtscale.format.decode import Record
from gtscale.loader.batch import FILLER_IDX
from gtscale.loader.path_edges import PathError, edge_id_table, path_edge_ids, path_edge_ids_fw, path_edges
from gtscale.format.shardfile import ShardError

#: Optional record keys that become the Batch field of the same name when asked for.
BATCH_KEYS = (
    schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.LAP_PE, schema.LAP_EIGVAL, schema.Y, schema.NODE_Y,
    schema.TARGET_Y, schema.GRAPH_FEAT,
)
#: Record keys a Batch key needs besides its own.
_COMPANIONS = {schema.TARGET_Y: (schema.TARGET_POS, schema.NODE_ID)}



def record_keys(keys: Sequence[str], max_dist: int) -> tuple[str, ...]:
    """Record keys to decode for Batch fields `keys` (+ spd and pred for path edges)."""
    needed = list(keys)
    needed += [c for k in keys for c in _COMPANIONS.get(k, ()) if c not in needed]
    if max_dist > 0:
        needed += [k for k in (schema.SPD, schema.PRED) if k not in needed]
    return tuple(needed)


def _gather(records: Sequence[Record], key: str, flatten: bool = False) -> np.ndarray:
    """Concatenation of one key over the batch; a record whose trailing shape differs is named."""
    arrays = [r.arrays[key].reshape(-1) if flatten else r.arrays[key] for r in records]
    try:
        return np.concatenate(arrays)
    except ValueError:
        first = arrays[0].shape[1:]
        odd = next(r for r, a in zip(records, arrays) if a.shape[1:] != first)
        raise ShardError(odd.shard, odd.key, f"{key} has shape {odd.arrays[key].shape}, others in its batch have [*, {', '.join(map(str, first))}]") from None


def _stack(records: Sequence[Record], key: str) -> np.ndarray:
    try:
        return np.stack([r.arrays[key] for r in records])
    except ValueError:
        first = records[0].arrays[key].shape
        odd = next(r for r in records if r.arrays[key].shape != first)
        raise ShardError(odd.shard, odd.key, f"{key} has shape {odd.arrays[key].shape}, others in its batch have {first}") from None


def _random_signs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(0, 2, size=shape, dtype=np.int8) * 2 - 1).astype(np.float32)


def collate(records: Sequence[Record], keys: Sequence[str] = (), max_dist: int = 0, rng: np.random.Generator | None = None) -> Batch:
    """Dense Batch of `records` with the optional fields in `keys` (see BATCH_KEYS), path edges up
    to `max_dist` hops when > 0, and sign flips drawn from `rng` when given."""
    b = len(records)
    sizes = np.fromiter((r.num_nodes for r in records), dtype=np.int64, count=b)
    n = int(sizes.max())
    node_mask = np.arange(n) < sizes[:, None]
    pair_mask = node_mask[:, :, None] & node_mask[:, None, :]

    def per_node(key: str, dtype, fill, values: np.ndarray | None = None) -> np.ndarray:
        values = _gather(records, key) if values is None else values
        out = np.full((b, n, *values.shape[1:]), fill, dtype=dtype)
        out[node_mask] = values
        return out

    def per_pair(key: str, fill) -> np.ndarray:
        out = np.full((b, n, n), fill, dtype=np.int64)
        out[pair_mask] = _gather(records, key, flatten=True)
        return out

    fields: dict[str, np.ndarray] = {"node_mask": node_mask}
    edge_counts = [r.arrays[schema.EDGE_INDEX].shape[1] for r in records]
    if _continuous(records):
        fields["node_feat_float"] = per_node(schema.NODE_FEAT_FLOAT, np.float32, 0.0)
        fields["node_feat"] = np.zeros((b, n, 0), np.int64)
        edge_rows = np.full((sum(edge_counts), 1), schema.FEATURE_SHIFT, np.int64)  # one column: "an edge"
    else:
        node_rows = _gather(records, schema.NODE_FEAT).astype(np.int64) + schema.FEATURE_SHIFT
        fields["node_feat"] = per_node(schema.NODE_FEAT, np.int64, schema.FEATURE_PAD, node_rows)
        edge_rows = _gather(records, schema.EDGE_FEAT).astype(np.int64) + schema.FEATURE_SHIFT
    edge_index = np.concatenate([r.arrays[schema.EDGE_INDEX] for r in records], axis=1).astype(np.int64)
    edge_graph = np.repeat(np.arange(b), edge_counts)
    edge_feat = np.full((b * n * n, edge_rows.shape[1]), schema.FEATURE_PAD, dtype=np.int64)
    edge_feat[(edge_graph * n + edge_index[0]) * n + edge_index[1]] = edge_rows
    fields["edge_feat"] = edge_feat.reshape(b, n, n, -1)

    spd = per_pair(schema.SPD, schema.SPD_UNREACHABLE) if (schema.SPD in keys or max_dist > 0) else None
    if schema.SPD in keys:
        fields["spd"] = spd
    for key in (schema.IN_DEGREE, schema.OUT_DEGREE):
        if key in keys:
            fields[key] = per_node(key, np.int64, schema.FEATURE_PAD)
    if schema.SVD_PE in keys:
        svd = per_node(schema.SVD_PE, np.float32, 0.0)
        if rng is not None:
            rank = svd.shape[2] // 2
            signs = _random_signs(rng, (b, 1, rank))
            svd[:, :, :rank] *= signs
            svd[:, :, rank:] *= signs
        fields["svd_pe"] = svd
    if schema.LAP_PE in keys:
        lap = per_node(schema.LAP_PE, np.float32, 0.0)
        if rng is not None:
            lap *= _random_signs(rng, (b, 1, lap.shape[2]))
        fields["lap_pe"] = lap
    if schema.LAP_EIGVAL in keys:
        fields["lap_eigval"] = _stack(records, schema.LAP_EIGVAL).astype(np.float32)
    if schema.Y in keys:
        y = _stack(records, schema.Y).astype(np.float32).reshape(b, -1)
        labelled = ~np.isnan(y)
        fields["y"], fields["y_mask"] = np.where(labelled, y, 0.0).astype(np.float32), labelled
    if schema.NODE_Y in keys:
        node_y = per_node(schema.NODE_Y, np.float32, np.nan)
        labelled = ~np.isnan(node_y)
        fields["node_y"], fields["node_y_mask"] = np.where(labelled, node_y, 0.0).astype(np.float32), labelled
    if schema.TARGET_Y in keys:
        fields.update(_targets(records))
    if schema.GRAPH_FEAT in keys:
        fields["graph_feat"] = _stack(records, schema.GRAPH_FEAT).astype(np.float32)
    if max_dist > 0:
        fields["path_edges"] = _path_edges(records, sizes, pair_mask, spd, edge_index, edge_graph, edge_rows, max_dist)
    fields["idx"] = np.fromiter((r.idx for r in records), dtype=np.int64, count=b)
    return Batch(**{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in fields.items()})


def _continuous(records: Sequence[Record]) -> bool:
    """Whether the batch's node features are node_feat_float (else node_feat); a batch never mixes the two."""
    return _all_or_none(records, schema.NODE_FEAT_FLOAT, ("node_feat (categorical) node features", "node_feat_float (continuous) node features"))


def _all_or_none(records: Sequence[Record], key: str, kinds: tuple[str, str]) -> bool:
    """Whether the batch's records carry `key`: all of them or none (kinds: without, with), else
    an error naming the first record that differs from the batch's first."""
    present = [key in r.arrays for r in records]
    if any(present) and not all(present):
        odd = records[present.index(not present[0])]
        raise ShardError(odd.shard, odd.key, f"has {kinds[not present[0]]}, others in its batch have {kinds[present[0]]}")
    return present[0]


def _targets(records: Sequence[Record]) -> dict[str, np.ndarray]:
    """target_pos, target_id, target_y, target_y_mask [B, T], padded with FILLER_IDX / unlabelled."""
    counts = np.array([len(r.arrays[schema.TARGET_POS]) for r in records])
    t = max(int(counts.max()), 1)
    slot = np.arange(t) < counts[:, None]
    local = np.concatenate([r.arrays[schema.TARGET_POS] for r in records]).astype(np.int64)
    global_ids = np.concatenate([r.arrays[schema.NODE_ID][r.arrays[schema.TARGET_POS].astype(np.int64)] for r in records]).astype(np.int64)
    labels = np.concatenate([r.arrays[schema.TARGET_Y] for r in records]).astype(np.float32)
    target_pos, target_id = np.zeros(slot.shape, np.int64), np.full(slot.shape, FILLER_IDX, np.int64)
    target_y = np.full(slot.shape, np.nan, np.float32)
    target_pos[slot], target_id[slot], target_y[slot] = local, global_ids, labels
    labelled = ~np.isnan(target_y)
    return {"target_pos": target_pos, "target_id": target_id, "target_y": np.where(labelled, target_y, 0.0).astype(np.float32),
            "target_y_mask": labelled}


def _path_edges(records, sizes, pair_mask, spd, edge_index, edge_graph, edge_rows, max_dist) -> np.ndarray:
    """Path edges along pred's paths, or along fw_mid's (Graphormer's Floyd–Warshall choice) when
    the records carry it (shards made with --paths floyd-warshall)."""
    b, n = pair_mask.shape[:2]
    rule = _path_rule(records)
    nodes = _node_matrix(records, rule, sizes)
    padded = np.full((b, n, n), -1, dtype=np.int64)
    padded[pair_mask] = nodes
    table = edge_id_table(edge_index, edge_graph, b, n)
    try:
        ids = path_edge_ids_fw(spd, padded, table, max_dist) if rule == schema.FW_MID else path_edge_ids(spd, padded, table, max_dist)
    except PathError as err:
        odd = records[err.graph]
        raise ShardError(odd.shard, odd.key, str(err)) from None
    return path_edges(edge_rows, ids)


def _path_rule(records: Sequence[Record]) -> str:
    """schema.FW_MID when every record carries it, schema.PRED when none does; a mix is an error."""
    with_mid = _all_or_none(records, schema.FW_MID, ("pred (BFS paths)", "fw_mid (Floyd–Warshall paths)"))
    return schema.FW_MID if with_mid else schema.PRED


def _node_matrix(records: Sequence[Record], key: str, sizes: np.ndarray) -> np.ndarray:
    """pred or fw_mid of every record, flattened and concatenated as int64, -1 for "none"."""
    pairs_per_graph = sizes * sizes
    nodes = _gather(records, key, flatten=True).astype(np.int64)
    sentinel = np.repeat([schema.pred_sentinel(r.arrays[key].dtype) for r in records], pairs_per_graph)
    none = nodes == sentinel
    bad = ~none & (nodes >= np.repeat(sizes, pairs_per_graph))
    if bad.any():
        odd = records[int(np.searchsorted(np.cumsum(pairs_per_graph), np.flatnonzero(bad)[0], side="right"))]
        raise ShardError(odd.shard, odd.key, f"{key} holds node ids outside the graph")
    nodes[none] = -1
    return nodes

