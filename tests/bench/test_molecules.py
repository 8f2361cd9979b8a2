"""gtscale.bench.molecules: the model benchmarks' batch of NCI molecules with PCQM4Mv2's sizes."""

from gtscale.bench.molecules import PCQM4MV2_MEAN_ATOMS, molecule_batch, sample_molecules


def test_sampled_molecules_follow_pcqm4mv2_sizes():
    from rdkit import Chem

    sizes = [Chem.MolFromSmiles(s).GetNumAtoms() for s in sample_molecules(400, seed=0, max_atoms=51)]
    assert 1 <= min(sizes) and max(sizes) <= 51
    assert abs(sum(sizes) / len(sizes) - PCQM4MV2_MEAN_ATOMS) < 1.5
    assert sample_molecules(8, seed=3, max_atoms=28) == sample_molecules(8, seed=3, max_atoms=28)


def test_molecule_batch_is_consistent():
    batch = molecule_batch(sample_molecules(6, seed=1, max_atoms=20), pad_to=24, svd_rank=4, path_hops=3)
    assert batch.max_graph_nodes == 24
    one_hop = batch.spd == 1
    assert (batch.path_edges[..., 0, :][one_hop] == batch.edge_feat[one_hop]).all()
    assert ((batch.edge_feat[..., 0] > 0) == one_hop).all()
    assert (batch.in_degree == one_hop.sum(dim=1)).all()
