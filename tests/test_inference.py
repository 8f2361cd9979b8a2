"""inference.py: new molecules get the structure their model reads, made as the shards made it, and
nothing else (no Laplacian encodings for an EGT, no SVD for a Graphormer)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gtscale.format import schema
from gtscale.inference import read_structure
from gtscale.loader.collate import record_keys
from gtscale.prep.featurize import featurize_smiles
from gtscale.prep.structure import StructureOptions, structure_many

MOLECULES = ["CC(=O)Nc1ccc(O)cc1", "c1ccccc1", "CCN", "C1CC2CCC1C2", "[Na+].[Cl-]", "CN1CCC[C@H]1c1cccnc1", "C"]
STRUCTURE_KEYS = [schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE, schema.LAP_PE, schema.LAP_EIGVAL]
#: Record keys one structure option makes together; fw_mid goes with pred (the path edges follow it).
MADE_TOGETHER = [{schema.SPD, schema.PRED}, {schema.IN_DEGREE, schema.OUT_DEGREE}, {schema.SVD_PE}, {schema.LAP_PE, schema.LAP_EIGVAL}]


def test_an_egt_reads_no_laplacian_and_a_graphormer_no_encodings():
    shards = StructureOptions(svd_rank=8, lap_k=8)
    egt = read_structure(shards, record_keys([schema.GRAPH_FEAT, schema.SPD, schema.SVD_PE], 0))
    assert egt == StructureOptions(spd=True, degree=False, svd_rank=8, lap_k=0)
    graphormer = read_structure(StructureOptions(paths="floyd-warshall"), record_keys([schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE], 5))
    assert graphormer == StructureOptions(spd=True, degree=True, svd_rank=0, lap_k=0, paths="floyd-warshall")
    assert read_structure(StructureOptions(paths="floyd-warshall"), record_keys([schema.SPD], 0)).paths == "bfs"  # no path edges: no fw_mid


@settings(max_examples=40, deadline=None, derandomize=True)
@given(keys=st.lists(st.sampled_from(STRUCTURE_KEYS), unique=True), path_dist=st.sampled_from([0, 3]),
       spd=st.booleans(), degree=st.booleans(), svd_rank=st.integers(0, 4), lap_k=st.integers(0, 4),
       paths=st.sampled_from(schema.PATH_RULES))
def test_read_structure_makes_what_the_model_reads_as_the_shards_made_it(keys, path_dist, spd, degree, svd_rank, lap_k, paths):
    if paths != "bfs" and not spd:
        paths = "bfs"  # the sharder refuses floyd-warshall without shortest paths
    shards = StructureOptions(spd=spd, degree=degree, svd_rank=svd_rank, lap_k=lap_k, paths=paths)
    read = record_keys(keys, path_dist)
    graphs = [featurize_smiles(s) for s in MOLECULES]
    edges = [(g[schema.EDGE_INDEX], len(g[schema.NODE_FEAT])) for g in graphs]
    full = structure_many(edges, shards)
    narrowed = structure_many(edges, read_structure(shards, read))
    for made, wanted in zip(full, narrowed):
        for group in MADE_TOGETHER:  # a group is made where the model reads one of its keys and the shards hold it
            assert set(wanted) & group == (set(made) & group if set(made) & group & set(read) else set())
        assert (schema.FW_MID in wanted) == (schema.FW_MID in made and schema.PRED in read)
        for key, value in wanted.items():
            np.testing.assert_array_equal(value, made[key])
