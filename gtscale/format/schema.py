"""The data contract: record keys in a shard, their dtypes, sentinels and feature vocabularies.

Every convention that more than one module relies on is defined here, once. The sharder writes
records with these keys; the loader reads them; the models see the shifted features of `Batch`.

A record is one graph. In a shard each key is a tar member ``<sample key>.<record key>.npy``
(``meta`` is ``.json``). Arrays use the smallest dtype that holds their values.

| key             | dtype, shape        | meaning                                                                     |
| --------------- | ------------------- | --------------------------------------------------------------------------- |
| node_feat       | uint8/int16 [N, F]  | categorical node features, raw (0-based) OGB values                         |
| edge_index      | int16/int32 [2, E]  | directed edges, both directions for undirected graphs                       |
| edge_feat       | uint8 [E, Fe]       | categorical edge features, raw (0-based)                                    |
| spd             | uint8 [N, N]        | shortest-path hops, SPD_UNREACHABLE where no path                           |
| pred            | uint8/uint16 [N, N] | pred[i, j]: node before j on a shortest i→j path                            |
| fw_mid          | uint8/uint16 [N, N] | Graphormer's Floyd–Warshall intermediate node of i→j                        |
| in_degree       | uint8/uint16 [N]    | number of edges ending at the node                                          |
| out_degree      | uint8/uint16 [N]    | number of edges starting at the node                                        |
| svd_pe          | float16 [N, 2r]     | U√Σ ‖ V√Σ of A+I, top r triplets, zero-padded if N < r                      |
| lap_pe          | float16 [N, k]      | eigenvectors of the normalised Laplacian, ascending                         |
| lap_eigval      | float16 [k]         | their eigenvalues; zero-padded if N < k                                     |
| y               | float32 [T]         | graph targets, NaN where unlabelled                                         |
| node_y          | float32 [N]         | node targets (node tasks), NaN where unlabelled                             |
| meta            | json                | idx in the source, num_nodes, num_edges (+ center; molecules: smiles, name) |
| node_feat_float | float16 [N, F]      | continuous node features (graphs that are not molecules)                    |
| node_id         | int64 [N]           | each node's id in the big graph (sampled subgraphs)                         |
| target_pos      | int16/int32 [T]     | position in this graph of each labelled node (ego: [0], the target)         |
| target_y        | float32 [T]         | label of the node at target_pos[t] (node tasks), NaN unknown                |
| graph_feat      | float16 [G]         | molecule-level input features (prep/graph_features.py)                      |

The names are those of the `Batch` fields they become: node_feat here is node_feat there (shifted
by FEATURE_SHIFT), target_pos here is Batch.target_pos. A node_ prefix means one value per node, a
target_ prefix one per target: node_id (every node's id in the big graph) and the Batch's target_id
(each target's, node_id[target_pos]) pair as node_y and target_y do.

Schema version 2 added node_feat_float, node_id, target_pos and target_y (sampled subgraphs of
huge graphs); version-1 shards hold none of them. Version 3 renamed x, edge_attr, x_float and
target_nodes to node_feat, edge_feat, node_feat_float and target_pos (RENAMED_KEYS). Shards of
every version in READABLE_SCHEMA_VERSIONS stay readable: the shard reader
(format.shardfile.iter_samples) gives an older shard's members their current names, and nothing
past it sees the old ones. In an ego-subgraph record meta.idx is the target's global node id and
the record has node_feat_float in place of node_feat and no edge_feat.

A molecule's meta also holds its SMILES as the source gave it (META_SMILES), so that what reads
molecules rather than graphs (the ECFP and kernel baselines) finds them in the shards; and its
id (`name`) where the source's ids are not integers. Shards written before meta held the SMILES
stay readable: only those readers refuse them.

graph_feat is written only by `gtscale shard --graph-features …` (manifest features.graph names the
generators and rdkit2d's train statistics) and needs no version bump either: it only adds a key.

fw_mid is written only by `gtscale shard --paths floyd-warshall` (manifest transform.paths), always
beside spd and pred, and needs no version bump: a reader that ignores it still finds valid
shortest paths in pred; the loader's path edges follow fw_mid where a record has it (Graphormer's
choice among tied shortest paths, prep/floyd_warshall.py), else pred. Its sentinel is pred's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: Version of the record layout; stored in every manifest and checked by the loader.
SCHEMA_VERSION = 3
#: Versions this code reads: version 2 only added keys to version 1, version 3 only renamed keys.
READABLE_SCHEMA_VERSIONS = (1, 2, 3)

# --- record keys -------------------------------------------------------------------------
NODE_FEAT = "node_feat"
EDGE_INDEX = "edge_index"
EDGE_FEAT = "edge_feat"
SPD = "spd"
PRED = "pred"
FW_MID = "fw_mid"
IN_DEGREE = "in_degree"
OUT_DEGREE = "out_degree"
SVD_PE = "svd_pe"
LAP_PE = "lap_pe"
LAP_EIGVAL = "lap_eigval"
Y = "y"
NODE_Y = "node_y"
META = "meta"
#: The field of a molecule record's meta that holds its SMILES.
META_SMILES = "smiles"
NODE_FEAT_FLOAT = "node_feat_float"
NODE_ID = "node_id"
TARGET_POS = "target_pos"
TARGET_Y = "target_y"
GRAPH_FEAT = "graph_feat"
#: graph_feat holds 0/1 fingerprint bits and z-scores clipped to ±6: float16 keeps both to ~3 digits.
GRAPH_FEAT_DTYPE = np.dtype(np.float16)

#: Keys every record has; the rest depend on the transform options. A record's node features are
#: either categorical (node_feat, with edge_feat: molecules) or continuous (node_feat_float, no edge
#: features: sampled subgraphs); NODE_FEATURE_KEYS lists the choice, the first one present wins.
REQUIRED_KEYS = (EDGE_INDEX, META)
NODE_FEATURE_KEYS = (NODE_FEAT, NODE_FEAT_FLOAT)
#: Optional keys decoded together with a requested key when a record has them (never an error when
#: absent): path edges ask for pred and follow fw_mid instead where the shards carry it.
DECODED_WITH = {PRED: (FW_MID,)}


class Produced(NamedTuple):
    """How shards come to hold an optional key, and where their manifest says so."""

    how: str  # what makes the sharder produce it (in "missing key" errors): the on-by-default keys name the flag to leave out
    entry: str | None = None  # manifest entry (section.name) that tells whether the shards hold it: false or 0 = they do not
    sized: bool = False  # the entry is also the key's width (svd rank, k, targets): filler records are shaped by it


_SPD_ON = "`gtscale shard` without --no-spd (shortest paths are on by default)"
_DEGREE_ON = "`gtscale shard` without --no-degree (degrees are on by default)"
_GRAPH_EGO = "`gtscale shard graph-ego`"
#: Every optional key: the one table the sharder's errors, the loader's manifest check
#: (format.manifest.check_readable) and its filler records (loader/filler.py) read.
PRODUCED = {
    SPD: Produced(_SPD_ON, "transform.spd"),
    PRED: Produced(_SPD_ON, "transform.spd"),
    FW_MID: Produced("`gtscale shard --paths floyd-warshall`"),
    IN_DEGREE: Produced(_DEGREE_ON, "transform.degree"),
    OUT_DEGREE: Produced(_DEGREE_ON, "transform.degree"),
    SVD_PE: Produced("`gtscale shard --svd-rank R` with R > 0", "transform.svd_rank", sized=True),
    LAP_PE: Produced("`gtscale shard --lap-k K` with K > 0", "transform.lap_k", sized=True),
    LAP_EIGVAL: Produced("`gtscale shard --lap-k K` with K > 0", "transform.lap_k", sized=True),
    Y: Produced("a dataset with graph targets", "task.num_targets", sized=True),
    NODE_Y: Produced("a node-task dataset (sampled subgraphs)"),
    NODE_FEAT_FLOAT: Produced(f"{_GRAPH_EGO} (continuous node features)"),
    NODE_ID: Produced(_GRAPH_EGO),
    TARGET_POS: Produced(_GRAPH_EGO),
    TARGET_Y: Produced(_GRAPH_EGO),
    GRAPH_FEAT: Produced("`gtscale shard --graph-features morgan2048,rdkit2d` (or another choice of generators)", "features.graph", sized=True),
}

#: Record keys of shards older than schema version 3 (old name → current name). Only the shard
#: reader reads this table (renamed_members), keyed by the manifest's schema_version.
RENAMED_KEYS = {"x": NODE_FEAT, "edge_attr": EDGE_FEAT, "x_float": NODE_FEAT_FLOAT, "target_nodes": TARGET_POS}
_RENAMED_MEMBERS = {f"{old}.npy": f"{new}.npy" for old, new in RENAMED_KEYS.items()}


def renamed_members(schema_version: int) -> dict[str, str]:
    """Member extensions ("x.npy") of shards of `schema_version` → their current names
    ("node_feat.npy"); empty for current shards."""
    return _RENAMED_MEMBERS if schema_version in (1, 2) else {}


# --- how records are made (manifest transform and features) ------------------------------------
#: Which shortest path the path edges follow (manifest transform.paths): "bfs" (pred) or
#: "floyd-warshall" (Graphormer's, recorded as fw_mid; prep/floyd_warshall.py).
PATH_RULES = ("bfs", "floyd-warshall")
#: Generators of graph_feat (manifest features.graph.generators; prep/graph_features.py computes them).
GRAPH_FEATURE_GENERATORS = ("morgan2048", "morgan2048counts", "rdkit2d")
#: Width of the Morgan generators (radius 2, hashed to this many bits or counts).
MORGAN_BITS = 2048

# --- sentinels -----------------------------------------------------------------------------
#: Hop count of an unreachable pair (different connected components). Real hop counts above
#: SPD_MAX are stored as SPD_MAX: beyond that no model distinguishes distances.
SPD_UNREACHABLE = 255
SPD_MAX = 254


#: The most nodes a record may hold: its predecessor matrix is uint16 at most (pred_dtype).
MAX_NODES = int(np.iinfo(np.uint16).max)


def pred_dtype(num_nodes: int) -> np.dtype:
    """Predecessor matrices hold node ids plus a sentinel (the dtype's max) for "no predecessor"
    (the diagonal and unreachable pairs), so uint8 serves graphs of up to 255 nodes."""
    if num_nodes <= np.iinfo(np.uint8).max:
        return np.dtype(np.uint8)
    if num_nodes <= MAX_NODES:
        return np.dtype(np.uint16)
    raise ValueError(f"graph of {num_nodes} nodes is too large for a dense predecessor matrix")


def pred_sentinel(dtype: np.dtype) -> int:
    return int(np.iinfo(dtype).max)


_UINT_LIMITS = tuple((np.dtype(dt), int(np.iinfo(dt).max)) for dt in (np.uint8, np.uint16, np.uint32, np.uint64))


def smallest_uint(max_value: int) -> np.dtype:
    """Smallest unsigned dtype that holds 0..max_value (called per record: no np.iinfo here)."""
    for dtype, limit in _UINT_LIMITS:
        if max_value <= limit:
            return dtype
    raise ValueError(f"{max_value} does not fit any unsigned integer dtype")


def index_dtype(num_nodes: int) -> np.dtype:
    """edge_index dtype: int16 while node ids fit, else int32 (signed, as torch likes)."""
    return _INT16 if num_nodes <= _INT16_MAX else _INT32  # per record: no np.iinfo here


_INT16, _INT32, _INT16_MAX = np.dtype(np.int16), np.dtype(np.int32), int(np.iinfo(np.int16).max)


# --- molecular feature vocabularies (OGB's smiles2graph) ------------------------------------
#: Sizes of OGB's 9 atom features: atomic number, chirality, degree, formal charge, #H,
#: #radical electrons, hybridisation, aromatic, in ring (ogb.utils.features.get_atom_feature_dims).
ATOM_FEATURE_DIMS = (119, 5, 12, 12, 10, 6, 6, 2, 2)
#: Sizes of OGB's 3 bond features: bond type, stereo, conjugated.
BOND_FEATURE_DIMS = (5, 6, 2)

# --- Batch feature convention ----------------------------------------------------------------
#: In a Batch, categorical features are shifted by FEATURE_SHIFT so that 0 (FEATURE_PAD) can mean
#: "padding node" in node_feat and "no edge" in edge_feat and path_edges. An embedding table for a
#: feature with vocabulary size V therefore has V + 1 rows, row 0 being the padding row.
FEATURE_PAD = 0
FEATURE_SHIFT = 1
