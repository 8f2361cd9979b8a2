"""The throughput figures of a logging window, and the speed a node task's progress bar shows."""

import torch

from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.train.throughput import StepResult, ThroughputWindow, progress_rate, real_nodes


def test_real_nodes_count_masked_in_nodes_and_edge_batch_nodes():
    mask = torch.tensor([[True, True, False], [True, True, True]])
    dense = Batch(node_feat=torch.zeros(2, 3, 1, dtype=torch.long), node_mask=mask, edge_feat=torch.zeros(2, 3, 3, 1, dtype=torch.long))
    assert real_nodes(dense) == 5
    sparse = EdgeBatch(edge_index=torch.zeros(2, 0, dtype=torch.long), graph_index=torch.zeros(7, dtype=torch.long), num_graphs=1,
                       node_feat_float=torch.zeros(7, 2))
    assert real_nodes(sparse) == 7


def test_a_node_task_reports_nodes_per_second():
    """One induced subgraph of 289k nodes per 12.5 s step: 0.08 graphs/s, 23k nodes/s."""
    window = ThroughputWindow()
    for _ in range(3):
        window.add(StepResult(torch.zeros(()), graphs=1, nodes=289_000, real_pairs=0, padded_pairs=0, seconds=12.5, skipped=0, stop=False))
    window.start -= 37.5  # as if the three steps took their 12.5 s each
    rates = window.rates(world_size=2)
    assert 2 * 3 * 289_000 / 37.6 < rates["nodes_per_s"] <= 2 * 3 * 289_000 / 37.5
    assert progress_rate(rates, node_task=True) == {"nodes_per_s": rates["nodes_per_s"]}
    assert progress_rate(rates, node_task=False) == {"graphs_per_s": rates["graphs_per_s"]}
