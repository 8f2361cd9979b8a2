"""Rank 0's record of a run: metrics.jsonl (one JSON object per line), TensorBoard events and a
tqdm bar. Every other rank gets a RunLog that writes nothing, so call sites need no rank checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tqdm import tqdm


class RunLog:
    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool, total_steps: int, start_step: int):
        self.enabled = enabled
        self._jsonl = open(run_dir / "metrics.jsonl", "a") if enabled else None
        self._tb = None
        if enabled and tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        self._bar = tqdm(total=total_steps, initial=start_step, unit="step", disable=not (enabled and progress), dynamic_ncols=True)

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in values.items()}
        self._jsonl.write(json.dumps({"step": step, "split": split, **clean}) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for key, value in clean.items():
                if value is not None:
                    self._tb.add_scalar(f"{split}/{key}", value, step)

    def progress(self, steps: int, **postfix: float) -> None:
        if self.enabled:
            self._bar.update(steps)
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)

    def message(self, text: str) -> None:
        if self.enabled:
            self._bar.write(text)

    def close(self) -> None:
        if self.enabled:
            self._bar.close()
            self._jsonl.close()
            if self._tb is not None:
                self._tb.close()
