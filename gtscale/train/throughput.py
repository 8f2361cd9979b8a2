"""Per-step results and the throughput figures of a logging window."""

from __future__ import annotations

import time

import torch
from dataclasses import dataclass, field


@dataclass
class StepResult:
    loss: torch.Tensor  # the step's mean loss over all ranks, on the device: read it when logging
    graphs: int  # graphs this rank trained on in the step
    nodes: int  # their real nodes (what a node task's speed is counted in: one induced subgraph is one graph)
    real_pairs: int  # Σ n² over those graphs: the attention work that mattered …
    padded_pairs: int  # … and B·N² that the padded batches cost
    seconds: float
    skipped: int  # micro-batches dropped for a non-finite loss
    stop: bool  # a rank received SIGTERM / SIGUSR1


@dataclass
class ThroughputWindow:
    """What happened since the last metrics line: the figures of its throughput."""

    start: float = field(default_factory=time.perf_counter)
    steps: int = 0
    graphs: int = 0
    nodes: int = 0
    real_pairs: int = 0
    padded_pairs: int = 0
    skipped: int = 0

    def add(self, result: StepResult) -> None:
        self.steps += 1
        self.graphs += result.graphs
        self.nodes += result.nodes
        self.real_pairs += result.real_pairs
        self.padded_pairs += result.padded_pairs
        self.skipped += result.skipped

    def rates(self, world_size: int) -> dict[str, float]:
        elapsed = max(1e-9, time.perf_counter() - self.start)
        return {
            "steps_per_s": self.steps / elapsed,
            "graphs_per_s": self.graphs * world_size / elapsed,  # all ranks: every rank runs the same batch count
            "nodes_per_s": self.nodes * world_size / elapsed,
            "padding_efficiency": self.real_pairs / max(1, self.padded_pairs),
        }


def real_nodes(batch) -> int:
    """Nodes a batch really holds: a padded Batch's masked-in nodes, an EdgeBatch's nodes."""
    mask = getattr(batch, "node_mask", None)
    return int(mask.sum()) if mask is not None else batch.num_nodes


def progress_rate(rates: dict[str, float], node_task: bool) -> dict[str, float]:
    """The speed the progress bar shows: nodes/s for a node task (a T-Social-size induced subgraph
    is one graph of 289k nodes: 0.08 graphs/s said nothing), graphs/s otherwise."""
    return {"nodes_per_s": rates["nodes_per_s"]} if node_task else {"graphs_per_s": rates["graphs_per_s"]}
