"""The online loader of random node-induced subgraphs (EdgeBatches for the sparse ET / MNA-GT): a
batch holds exactly the stored edges among its nodes (against scipy.sparse); 2 ranks × 2 workers
draw disjoint node sets in every round; evaluation scores each eval node exactly once; a resumed
loader yields what the uninterrupted one would; impossible settings are refused."""

import numpy as np
import pytest
import torch

from gtscale.graphs.induced import build_induced_loader
from gtscale.graphs.splits import ratio_split
from gtscale.graphs.store import GraphStore
from gtscale.loader.config import LoaderConfig

FRACTION = 0.2


def _config(**kw) -> LoaderConfig:
    return LoaderConfig(**({"num_workers": 0, "keys": ["target_y"], "seed": 5} | kw))


@pytest.fixture(scope="module")
def store(ego_shards):
    return ego_shards[0]


@pytest.fixture(scope="module")
def splits(store):
    return ratio_split(np.asarray(GraphStore.open(store).labels), 0.4, 0)


def test_a_batch_holds_exactly_the_edges_among_its_nodes(store, splits):
    graph = GraphStore.open(store)
    n = graph.num_nodes
    import scipy.sparse as sp

    adjacency = sp.csr_matrix((np.ones(len(graph.indices)), np.asarray(graph.indices), np.asarray(graph.indptr)), shape=(n, n))
    loader = build_induced_loader(store, np.arange(n), FRACTION, _config(epoch_batches=3), train=True, rank=0, world_size=1)
    for batch in loader:
        nodes = batch.target_id.numpy()  # every node is a target here: target_id lists the batch's nodes in order
        assert batch.target_rows.tolist() == list(range(batch.num_nodes)) and len(nodes) == round(FRACTION * n)
        expected = adjacency[nodes][:, nodes].tocoo()
        got = {(int(u), int(v)) for u, v in batch.edge_index.t()}
        assert got == set(zip(expected.row.tolist(), expected.col.tolist())) and batch.num_edges == len(got) > 0
        np.testing.assert_array_equal(batch.node_feat_float.numpy(), np.asarray(graph.features[nodes], np.float32))
        labels = np.asarray(graph.labels[nodes])
        np.testing.assert_array_equal(batch.target_y_mask.numpy(), labels >= 0)
        np.testing.assert_array_equal(batch.target_y.numpy(), (labels == 1).astype(np.float32))
    train = build_induced_loader(store, splits["train"], FRACTION, _config(epoch_batches=2), train=True, rank=0, world_size=1)
    for batch, everything in zip(train, build_induced_loader(store, np.arange(n), FRACTION, _config(epoch_batches=2), train=True, rank=0, world_size=1)):
        nodes = everything.target_id.numpy()
        assert np.isin(batch.target_id.numpy(), splits["train"]).all()
        np.testing.assert_array_equal(batch.target_id.numpy(), nodes[np.isin(nodes, splits["train"])])  # the split's nodes among them
        np.testing.assert_array_equal(nodes[batch.target_rows.numpy()], batch.target_id.numpy())


def _rank_batches(store, targets, config, world_size, train, epochs=1):
    out = []
    for rank in range(world_size):
        loader = build_induced_loader(store, targets, FRACTION, config, train=train, rank=rank, world_size=world_size)
        out.append([b for _ in range(epochs) for b in loader])
    return out


def test_ranks_and_workers_draw_disjoint_nodes(store):
    n = GraphStore.open(store).num_nodes
    config = _config(num_workers=2, epoch_batches=6, start_method="fork")
    per_rank = _rank_batches(store, np.arange(n), config, world_size=2, train=True, epochs=2)
    assert [len(b) for b in per_rank] == [12, 12]
    for epoch in range(2):
        for round_ in range(3):  # a rank's batch b comes from worker b % 2, round b // 2
            slots = [per_rank[r][6 * epoch + 2 * round_ + w].target_id.numpy() for r in range(2) for w in range(2)]
            joined = np.concatenate(slots)
            assert len(np.unique(joined)) == len(joined) == 4 * round(FRACTION * n), "the 4 slots of a round share no node"
    first, second = per_rank[0][0].target_id.numpy(), per_rank[0][6].target_id.numpy()
    assert not np.array_equal(first, second), "every epoch draws anew"


def test_evaluation_scores_each_eval_node_once(store, splits):
    config = _config(num_workers=2, start_method="fork")
    per_rank = _rank_batches(store, splits["val"], config, world_size=2, train=False)
    ids = np.concatenate([b.target_id.numpy() for batches in per_rank for b in batches])
    assert sorted(ids.tolist()) == sorted(splits["val"].tolist())
    assert sum(len(b) for b in per_rank) == round(1 / FRACTION)  # the parts cover the graph once
    again = _rank_batches(store, splits["val"], config, world_size=2, train=False)
    assert all(torch.equal(a.edge_index, b.edge_index) for x, y in zip(per_rank, again) for a, b in zip(x, y)), "the same parts every time"


def _same(a, b) -> bool:
    return torch.equal(a.target_id, b.target_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.node_feat_float, b.node_feat_float)


@pytest.mark.parametrize("stop", [3, 7, 8])  # mid-epoch, right after an epoch's last batch, one into the next
def test_a_resumed_loader_yields_what_the_uninterrupted_one_would(store, splits, stop):
    config = _config(num_workers=2, epoch_batches=7, start_method="fork")

    def loader():
        return build_induced_loader(store, splits["train"], FRACTION, config, train=True, rank=1, world_size=2)

    whole = loader()
    stream = [b for _ in range(2) for b in whole]
    first = loader()
    taken, batches = [], iter(first)
    for _ in range(stop):
        try:
            taken.append(next(batches))
        except StopIteration:  # the epoch ended: the next iteration starts the next one
            batches = iter(first)
            taken.append(next(batches))
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    if resumed.epoch == 1:  # the resume was in epoch 0: epoch 1 follows
        rest += list(resumed)
    assert len(taken) + len(rest) == len(stream)
    assert all(_same(a, b) for a, b in zip(taken + rest, stream))
    other = build_induced_loader(store, splits["train"], FRACTION / 2, config, train=True, rank=1, world_size=2)
    with pytest.raises(Exception, match="fingerprint|shards|exact resume"):
        other.load_state_dict(state)


def test_impossible_settings_are_refused(store, splits):
    from gtscale.errors import UserError

    with pytest.raises(UserError, match="fraction × ranks × workers ≤ 1"):
        build_induced_loader(store, splits["train"], 0.3, _config(num_workers=2), train=True, rank=0, world_size=2)
    with pytest.raises(UserError, match="'spd'"):
        build_induced_loader(store, splits["train"], FRACTION, _config(keys=["spd", "target_y"]), train=True, rank=0, world_size=1)
    with pytest.raises(UserError, match="target node ids"):
        build_induced_loader(store, np.array([0, 10_000]), FRACTION, _config(), train=False, rank=0, world_size=1)


def test_the_sparse_et_runs_on_batches_and_the_filler(store, splits):
    from gtscale.models import build_model, load_model_config

    cfg = load_model_config("et-tfinance") | {"node_width": 16, "head_dim": 8, "num_heads": 2, "num_memories": 16}
    model = build_model(cfg)
    loader = build_induced_loader(store, splits["val"], FRACTION, _config(), train=False, rank=0, world_size=1)
    for batch in [next(iter(loader)), loader.filler_batch()]:
        out = model(batch)
        assert out.node.shape == (len(batch.target_rows), 32) and torch.isfinite(out.node).all()  # the targets' rows
