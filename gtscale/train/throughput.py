"""Per-step results and the throughput figures of a logging window."""

from __future__ import annotations

import time

import torch
from dataclasses import dataclass, field


@dataclass
class StepResult:
    loss: torch.Tensor  # the step's mean loss over all ranks, on the device: read it when logging
    graphs: int  # graphs this rank trained on in the step
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
    real_pairs: int = 0
    padded_pairs: int = 0
    skipped: int = 0

    def add(self, result: StepResult) -> None:
        self.steps += 1
        self.graphs += result.graphs
        self.real_pairs += result.real_pairs
        self.padded_pairs += result.padded_pairs
        self.skipped += result.skipped

    def rates(self, world_size: int) -> dict[str, float]:
        elapsed = max(1e-9, time.perf_counter() - self.start)
        return {
            "steps_per_s": self.steps / elapsed,
            "graphs_per_s": self.graphs * world_size / elapsed,  # all ranks: every rank runs the same batch count
            "padding_efficiency": self.real_pairs / max(1, self.padded_pairs),
        }
