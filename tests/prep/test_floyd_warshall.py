"""`--paths floyd-warshall`: path edges equal those of Graphormer's own Floyd–Warshall path choice.

The reference below is a transcription, written here from reading microsoft/Graphormer's
graphormer/data/algos.pyx, of its floyd_warshall (distances 0 / 1 / 510, k-i-j loops, the k of
the last strict improvement kept in `path`) and gen_edge_input (the path rebuilt recursively by
get_all_edges, the features of its edges in order, -1 past the end). Graphormer then keeps the
first multi_hop_max_dist of them; the edge features it passes in are the bond features + 1.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtscale.cli import main
from gtscale.format import schema
from gtscale.format.tario import iter_shard
from gtscale.loader.collate import collate
from gtscale.loader.config import LoaderConfig
from gtscale.loader.path_edges import PathError, graph_path_edges
from gtscale.loader.stream import build_loader
from gtscale.prep.featurize import featurize_smiles
from gtscale.prep.floyd_warshall import floyd_warshall_mid
from gtscale.prep.structure import StructureOptions, structure
from shard_fixtures import nci_records

UNREACHABLE = 510  # the authors' "no path" distance and path entry


def authors_floyd_warshall(adjacency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """algos.pyx floyd_warshall on a 0/1 adjacency [n, n]: (distances, path)."""
    n = adjacency.shape[0]
    dist = adjacency.astype(np.int64).copy()
    path = -np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j:
                dist[i, j] = 0
            elif dist[i, j] == 0:
                dist[i, j] = UNREACHABLE
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if dist[i, j] > dist[i, k] + dist[k, j]:
                    dist[i, j] = dist[i, k] + dist[k, j]
                    path[i, j] = k
    far = dist >= UNREACHABLE
    path[far], dist[far] = UNREACHABLE, UNREACHABLE
    return dist, path


def authors_all_edges(path: np.ndarray, i: int, j: int) -> list[int]:
    """algos.pyx get_all_edges: the intermediate nodes of the i→j path."""
    k = int(path[i, j])
    if k == -1:
        return []
    return authors_all_edges(path, i, k) + [k] + authors_all_edges(path, k, j)


def authors_edge_input(max_dist: int, path: np.ndarray, edge_feat: np.ndarray) -> np.ndarray:
    """algos.pyx gen_edge_input: [n, n, max_dist, F] features of each path's edges, -1 past the end
    (positions past max_dist dropped, as Graphormer's multi_hop_max_dist slice does)."""
    n = path.shape[0]
    out = -np.ones((n, n, max_dist, edge_feat.shape[-1]), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j or path[i, j] == UNREACHABLE:
                continue
            nodes = [i] + authors_all_edges(path, i, j) + [j]
            for k in range(min(len(nodes) - 1, max_dist)):
                out[i, j, k, :] = edge_feat[nodes[k], nodes[k + 1], :]
    return out


def authors_path_edges(edge_index: np.ndarray, edge_feat: np.ndarray, n: int, max_dist: int) -> tuple[np.ndarray, np.ndarray]:
    """(path matrix, path edges in gtscale's convention: bond features + FEATURE_SHIFT, FEATURE_PAD where none)."""
    adjacency = np.zeros((n, n), dtype=bool)
    adjacency[edge_index[0], edge_index[1]] = True
    attn_edge_type = np.zeros((n, n, edge_feat.shape[1]), dtype=np.int64)
    attn_edge_type[edge_index[0], edge_index[1]] = edge_feat.astype(np.int64) + schema.FEATURE_SHIFT
    _, path = authors_floyd_warshall(adjacency)
    edges = authors_edge_input(max_dist, path, attn_edge_type)
    return path, np.where(edges == -1, schema.FEATURE_PAD, edges)


#: Molecules with tied shortest paths: rings (the issue's cyclohexene and p-benzoquinone), fused
#: and bridged ring systems, cages.
TIED = {
    "cyclohexene": "C1=CCCCC1",
    "p-benzoquinone": "O=C1C=CC(=O)C=C1",
    "naphthalene": "c1ccc2ccccc2c1",
    "cubane": "C12C3C4C1C5C2C3C45",
    "bicyclo[2.2.2]octane": "C1CC2CCC1CC2",
    "adamantanol": "OC1C2CC3CC1CC(C2)C3",
    "pyrene": "c1cc2ccc3cccc4ccc(c1)c2c34",
    "caffeine": "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
    "ibuprofen": "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
}
FW = StructureOptions(svd_rank=0, lap_k=0, paths="floyd-warshall")


def _fw_edges(edge_index: np.ndarray, edge_feat: np.ndarray, n: int, max_dist: int) -> np.ndarray:
    arrays = structure(edge_index, n, FW)
    return graph_path_edges(edge_index, edge_feat, arrays[schema.SPD], arrays[schema.PRED], max_dist, arrays[schema.FW_MID])


@pytest.mark.parametrize("name", sorted(TIED))
@pytest.mark.parametrize("max_dist", [1, 3, 5, 20])
def test_path_edges_equal_the_authors_on_molecules_with_tied_paths(name, max_dist):
    graph = featurize_smiles(TIED[name])
    n, edge_index, edge_feat = len(graph[schema.NODE_FEAT]), graph[schema.EDGE_INDEX].astype(np.int64), graph[schema.EDGE_FEAT]
    path, expected = authors_path_edges(edge_index, edge_feat, n, max_dist)
    np.testing.assert_array_equal(_fw_edges(edge_index, edge_feat, n, max_dist), expected)  # every pair, every position
    mid = floyd_warshall_mid(edge_index, n)
    np.testing.assert_array_equal(np.where(mid == schema.pred_sentinel(mid.dtype), -1, mid.astype(np.int64)), np.where(path == UNREACHABLE, -1, path))


def test_bfs_paths_differ_from_the_authors_where_shortest_paths_tie():
    """What the option is for: the default BFS paths give other bond features on these molecules."""
    differing = []
    for name, smiles in TIED.items():
        graph = featurize_smiles(smiles)
        n, edge_index, edge_feat = len(graph[schema.NODE_FEAT]), graph[schema.EDGE_INDEX].astype(np.int64), graph[schema.EDGE_FEAT]
        arrays = structure(edge_index, n, StructureOptions(svd_rank=0, lap_k=0))
        bfs = graph_path_edges(edge_index, edge_feat, arrays[schema.SPD], arrays[schema.PRED], 5)
        if not np.array_equal(bfs, authors_path_edges(edge_index, edge_feat, n, 5)[1]):
            differing.append(name)
    assert {"cyclohexene", "p-benzoquinone"} <= set(differing)


def test_path_edges_equal_the_authors_on_nci_molecules(nci_by_idx):
    for record in list(nci_by_idx.values())[:40]:
        n, edge_index, edge_feat = len(record[schema.NODE_FEAT]), record[schema.EDGE_INDEX].astype(np.int64), record[schema.EDGE_FEAT]
        np.testing.assert_array_equal(_fw_edges(edge_index, edge_feat, n, 5), authors_path_edges(edge_index, edge_feat, n, 5)[1])


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 12))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs = [(u, v) for u, v in dict.fromkeys(pairs) if u != v]
    if not draw(st.booleans()):
        pairs = list(dict.fromkeys(pairs + [(v, u) for u, v in pairs]))
    edge_index = np.array(pairs, dtype=np.int64).T.reshape(2, -1)
    attr = np.array(draw(st.lists(st.integers(0, 4), min_size=edge_index.shape[1], max_size=edge_index.shape[1])), dtype=np.uint8)
    return n, edge_index, attr.reshape(-1, 1)


@settings(max_examples=60, deadline=None)
@given(random_graphs(), st.integers(1, 6))
def test_path_edges_equal_the_authors_on_random_directed_and_disconnected_graphs(graph, max_dist):
    n, edge_index, edge_feat = graph
    np.testing.assert_array_equal(_fw_edges(edge_index, edge_feat, n, max_dist), authors_path_edges(edge_index, edge_feat, n, max_dist)[1])


def test_long_paths_stored_at_spd_max_still_get_the_authors_first_edges():
    n = schema.SPD_MAX + 6  # a path graph: far pairs are capped at SPD_MAX hops
    src = np.arange(n - 1)
    edge_index = np.stack([np.concatenate([src, src + 1]), np.concatenate([src + 1, src])])
    edge_feat = (np.arange(edge_index.shape[1]) % 5).astype(np.uint8)[:, None]
    out = _fw_edges(edge_index, edge_feat, n, 3)
    np.testing.assert_array_equal(out[0, n - 1, :, 0], edge_feat[:3, 0].astype(np.int64) + schema.FEATURE_SHIFT)
    backwards = (n - 1) + np.array([n - 2, n - 3, n - 4])  # rows of the edges n-1 → n-2 → n-3 → n-4
    np.testing.assert_array_equal(out[n - 1, 0, :, 0], edge_feat[backwards, 0].astype(np.int64) + schema.FEATURE_SHIFT)


def test_a_corrupt_fw_mid_is_an_error_naming_the_pair():
    graph = featurize_smiles(TIED["cyclohexene"])
    edge_index, edge_feat = graph[schema.EDGE_INDEX].astype(np.int64), graph[schema.EDGE_FEAT]
    arrays = structure(edge_index, 6, FW)
    for pair, value, message in [((0, 3), 0, "not on a shortest"), ((0, 3), 250, "outside the graph"), ((0, 1), 4, "not on a shortest")]:
        mid = arrays[schema.FW_MID].copy()
        mid[pair] = value
        with pytest.raises(PathError, match=message):
            graph_path_edges(edge_index, edge_feat, arrays[schema.SPD], arrays[schema.PRED], 3, mid)
    mid = arrays[schema.FW_MID].copy()
    mid[0, 3] = schema.pred_sentinel(mid.dtype)  # "no intermediate node" for a pair 3 hops apart
    with pytest.raises(PathError, match=r"\(0, 3\).*not an edge"):
        graph_path_edges(edge_index, edge_feat, arrays[schema.SPD], arrays[schema.PRED], 3, mid)


def test_paths_option_needs_shortest_paths():
    with pytest.raises(ValueError, match="paths"):
        StructureOptions(spd=False, paths="floyd-warshall")
    with pytest.raises(ValueError, match="paths"):
        StructureOptions(paths="dijkstra")


# --- through the sharder and the loader ------------------------------------------------------------
def _write_csv(path: Path) -> Path:
    rows = ["id,smiles,y"] + [f"{i},{smiles},{i}.0" for i, smiles in enumerate(TIED.values())]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fw")
    csv = _write_csv(root / "tied.csv")
    outs = {}
    for rule in ("bfs", "floyd-warshall"):
        outs[rule] = root / rule
        args = ["shard", "smiles-csv", "--input", str(csv), "--id-column", "id", "--target-columns", "y", "--split-column", "id",
                "--out", str(outs[rule]), "--no-progress", "--svd-rank", "0", "--lap-k", "0"]
        assert main(args + (["--paths", rule] if rule != "bfs" else [])) == 0
    return outs


def _records(out: Path) -> dict[str, dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {key: rec for info in manifest["splits"].values() for s in info["shards"] for key, rec in iter_shard(out / s["path"])}


def test_manifest_names_the_path_rule_and_only_floyd_warshall_shards_carry_fw_mid(sharded):
    for rule, out in sharded.items():
        assert json.loads((out / "manifest.json").read_text())["transform"]["paths"] == rule
        records = _records(out)
        assert all((schema.FW_MID in r) == (rule == "floyd-warshall") for r in records.values())
        assert all(schema.PRED in r for r in records.values())  # pred stays: readers that ignore fw_mid still work
    bfs, fw = _records(sharded["bfs"]), _records(sharded["floyd-warshall"])
    for key in bfs:  # the rest of each record is unchanged
        assert set(fw[key]) - set(bfs[key]) == {schema.FW_MID}
        for name, array in bfs[key].items():
            if name != schema.META:
                np.testing.assert_array_equal(fw[key][name], array)


def test_loader_batches_follow_the_authors_paths(sharded):
    config = LoaderConfig(batching="graphs", batch_size=4, keys=(schema.SPD,), path_edges_max_dist=5, shuffle_buffer=0, num_workers=0)
    seen = 0
    for split in json.loads((sharded["floyd-warshall"] / "manifest.json").read_text())["splits"]:
        for batch in build_loader(sharded["floyd-warshall"], split, config, train=False, rank=0, world_size=1):
            for g, idx in enumerate(batch.idx.tolist()):
                graph = featurize_smiles(list(TIED.values())[idx])
                n = len(graph[schema.NODE_FEAT])
                expected = authors_path_edges(graph[schema.EDGE_INDEX].astype(np.int64), graph[schema.EDGE_FEAT], n, 5)[1]
                np.testing.assert_array_equal(batch.path_edges[g, :n, :n].numpy(), expected)
                assert (batch.path_edges[g, n:] == schema.FEATURE_PAD).all() and (batch.path_edges[g, :, n:] == schema.FEATURE_PAD).all()
                seen += 1
    assert seen == len(TIED)


def test_a_batch_mixing_path_rules_is_an_error_naming_the_record():
    from gtscale.format.decode import Record
    from gtscale.format.shardfile import ShardError

    records = []
    for i, options in enumerate([FW, StructureOptions(svd_rank=0, lap_k=0)]):
        graph = featurize_smiles(TIED["cyclohexene"])
        arrays = {k: v for k, v in graph.items()} | structure(graph[schema.EDGE_INDEX], 6, options)
        records.append(Record(f"k{i}", "s.tar", 6, i, arrays))
    with pytest.raises(ShardError, match="k1.*pred"):
        collate(records, (schema.SPD,), 3)


def test_default_structure_is_unchanged():
    """--paths bfs (the default) writes what gtscale wrote before the option existed: the sha256 of
    spd, pred and degrees of the first 60 NCI molecules, taken with the code of main before this
    change (structure.py's BFS); the sharded tars were also compared byte for byte then."""
    digest = hashlib.sha256()
    for _, record in nci_records(60, options=StructureOptions(svd_rank=0, lap_k=0)):
        assert schema.FW_MID not in record
        for key in (schema.SPD, schema.PRED, schema.IN_DEGREE, schema.OUT_DEGREE):
            digest.update(f"{key}:{record[key].dtype}:{record[key].shape}".encode() + record[key].tobytes())
    assert digest.hexdigest() == DEFAULT_STRUCTURE_SHA256


DEFAULT_STRUCTURE_SHA256 = "46002a26dd750e37b0e485083cb2e3fd7dc1c8b7986da8645e2adfbaf667a0c8"  # main at 8e1fa77


def test_a_corrupt_fw_mid_in_a_batch_is_an_error_naming_the_record():
    from gtscale.format.decode import Record
    from gtscale.format.shardfile import ShardError

    records = []
    for i in range(2):
        graph = featurize_smiles(TIED["cyclohexene"])
        arrays = {k: v for k, v in graph.items()} | structure(graph[schema.EDGE_INDEX], 6, FW)
        records.append(Record(f"k{i}", "s.tar", 6, i, arrays))
    records[1].arrays[schema.FW_MID][0, 3] = 0  # not between 0 and 3
    with pytest.raises(ShardError, match=r"k1.*fw_mid is not on a shortest"):
        collate(records, (schema.SPD,), 3)
    records[1].arrays[schema.FW_MID][0, 3] = 7  # no node 7 in a 6-atom ring
    with pytest.raises(ShardError, match=r"k1.*fw_mid holds node ids outside the graph"):
        collate(records, (schema.SPD,), 3)


def test_floyd_warshall_paths_without_shortest_paths_is_refused(tmp_path, capsys):
    csv = _write_csv(tmp_path / "tied.csv")
    args = ["shard", "smiles-csv", "--input", str(csv), "--out", str(tmp_path / "out"), "--no-progress", "--paths", "floyd-warshall", "--no-spd"]
    assert main(args) == 2
    assert "--paths floyd-warshall needs shortest paths" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
