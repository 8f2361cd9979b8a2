"""The featurizer must equal ogb.utils.smiles2graph on every bundled molecule."""

import csv

import numpy as np
import pytest
from ogb.utils import smiles2graph

from gtscale.format import schema
from gtscale.prep.featurize import FeaturizeError, featurize_smiles
from gtscale.prep.sources.bundled import NCI_SMILES, WEHI


def bundled_smiles() -> list[str]:
    nci = [line.split()[0] for line in NCI_SMILES.read_text().splitlines()]
    with open(WEHI) as f:
        wehi = [row[0] for row in csv.reader(f)]
    return nci + wehi


def test_identical_to_smiles2graph_on_all_bundled_molecules():
    compared = rejected = 0
    for smiles in bundled_smiles():
        try:
            reference = smiles2graph(smiles)
        except Exception:  # smiles2graph crashes on unparsable SMILES; we must reject those
            with pytest.raises(FeaturizeError):
                featurize_smiles(smiles)
            rejected += 1
            continue
        graph = featurize_smiles(smiles)
        assert np.array_equal(graph[schema.NODE_FEAT], reference["node_feat"]), smiles
        assert np.array_equal(graph[schema.EDGE_INDEX], reference["edge_index"]), smiles
        assert np.array_equal(graph[schema.EDGE_FEAT], reference["edge_feat"]), smiles
        compared += 1
    assert compared > 14_900 and rejected < 20


@pytest.mark.parametrize(
    "smiles",
    [
        "[Na+].[Cl-]", "C", "[2H]C([2H])([2H])[2H]", "C[C@H](N)C(=O)O", "F/C=C/F", "F/C=C\\F", "c1ccccc1-c1ccccc1",
        "[Fe+3]", "*C", "[U]", "C#N", "[NH3]->[Cu+2]<-[NH3]", "C$C", "OCl(=O)(=O)=O", "C[C@@]1(O)CC/C=C/CC1",
    ],
)
def test_edge_cases_match_smiles2graph(smiles):
    reference = smiles2graph(smiles)
    graph = featurize_smiles(smiles)
    assert np.array_equal(graph[schema.NODE_FEAT], reference["node_feat"])
    assert np.array_equal(graph[schema.EDGE_INDEX], reference["edge_index"])
    assert np.array_equal(graph[schema.EDGE_FEAT], reference["edge_feat"])


def test_compact_dtypes():
    graph = featurize_smiles("CCO")
    assert graph[schema.NODE_FEAT].dtype == np.uint8 and graph[schema.NODE_FEAT].shape == (3, len(schema.ATOM_FEATURE_DIMS))
    assert graph[schema.EDGE_INDEX].dtype == np.int16 and graph[schema.EDGE_INDEX].shape == (2, 4)
    assert graph[schema.EDGE_FEAT].dtype == np.uint8 and graph[schema.EDGE_FEAT].shape == (4, len(schema.BOND_FEATURE_DIMS))
    single = featurize_smiles("[Na+]")
    assert single[schema.EDGE_INDEX].shape == (2, 0) and single[schema.EDGE_FEAT].shape == (0, 3)


@pytest.mark.parametrize("smiles,reason", [("", "empty_smiles"), ("   ", "empty_smiles"), ("C1CC", "invalid_smiles"), ("not a molecule", "invalid_smiles")])
def test_rejects_carry_a_reason(smiles, reason):
    with pytest.raises(FeaturizeError) as err:
        featurize_smiles(smiles)
    assert err.value.reason == reason
