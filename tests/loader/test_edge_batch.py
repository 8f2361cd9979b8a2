"""EdgeBatch: collated from records and converted from a dense Batch, the two views agree; bad
edge ids are named with their record."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from model_fixtures import random_graph  # noqa: E402

from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.shardfile import ShardError
from gtscale.loader.collate import collate
from gtscale.loader.edge_batch import EdgeBatch, collate_edges


def _records(rng) -> list[Record]:
    out = []
    for i, (n, parts) in enumerate([(6, 1), (1, 1), (8, 2), (5, 1)]):
        g = random_graph(rng, n, components=parts)
        arrays = {schema.NODE_FEAT: g["node_feat"], schema.EDGE_INDEX: g["edge_index"], schema.EDGE_FEAT: g["edge_feat"],
                  schema.LAP_PE: g["lap_pe"], schema.NODE_Y: rng.integers(0, 2, n).astype(np.float32),
                  schema.Y: np.array([float(i)], np.float32), schema.TARGET_POS: np.array([0])}
        out.append(Record(key=f"g{i}", shard="s", num_nodes=n, idx=i, arrays=arrays))
    return out


def _edge_set(eb: EdgeBatch) -> set:
    return {(int(u), int(v), *map(int, a)) for (u, v), a in zip(eb.edge_index.t(), eb.edge_feat)}


def test_collated_and_converted_edge_batches_agree():
    records = _records(np.random.default_rng(0))
    keys = (schema.LAP_PE, schema.NODE_Y, schema.Y, schema.TARGET_POS)
    direct = collate_edges(records, keys)
    converted = EdgeBatch.from_dense(collate(records, (schema.LAP_PE, schema.NODE_Y, schema.Y)))
    assert direct.num_nodes == 20 and direct.num_graphs == 4
    torch.testing.assert_close(direct.node_feat, converted.node_feat)
    torch.testing.assert_close(direct.graph_index, converted.graph_index)
    torch.testing.assert_close(direct.lap_pe, converted.lap_pe)
    torch.testing.assert_close(direct.node_y, converted.node_y)
    torch.testing.assert_close(direct.y, converted.y)
    assert _edge_set(direct) == _edge_set(converted) and direct.num_edges == converted.num_edges > 0
    assert direct.target_rows.tolist() == [0, 6, 7, 15]  # each graph's node 0, offset by the nodes before it
    # edges stay inside their graph
    gi = direct.graph_index
    assert (gi[direct.edge_index[0]] == gi[direct.edge_index[1]]).all()


def test_edge_ids_outside_the_graph_are_named():
    records = _records(np.random.default_rng(1))
    records[2].arrays[schema.EDGE_INDEX] = records[2].arrays[schema.EDGE_INDEX].copy()
    records[2].arrays[schema.EDGE_INDEX][0, 0] = 99
    with pytest.raises(ShardError, match="g2"):
        collate_edges(records)


def test_an_edge_batch_needs_node_input():
    with pytest.raises(ValueError):
        EdgeBatch(edge_index=torch.zeros(2, 0, dtype=torch.long), graph_index=torch.zeros(3, dtype=torch.long), num_graphs=1)
