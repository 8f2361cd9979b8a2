"""launch/gpu-check: its loss comparison, and its whole flow on 2 CPU processes (`--cpu`)."""

import json

import pytest

from gtscale.bench.gpu_check import main, max_relative_difference, train_losses


def test_loss_comparison_finds_the_worst_step_and_missing_ones(tmp_path):
    rows = [{"step": 1, "split": "train", "loss": 2.0}, {"step": 2, "split": "train", "loss": 1.0}, {"step": 2, "split": "valid", "mae": 9.0},
            {"step": 2, "split": "train", "loss": 1.5}]  # a resumed run repeats step 2: the last row counts
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    resumed = train_losses(tmp_path)
    assert resumed == {1: 2.0, 2: 1.5}
    assert max_relative_difference(resumed, {1: 2.0, 2: 1.0}, range(1, 3)) == (0.5, 2)
    assert max_relative_difference(resumed, {1: 2.0, 2: 1.5}, range(1, 3)) == (0.0, 1)
    assert max_relative_difference(resumed, {1: 2.0}, range(1, 3)) == (float("inf"), 2)


@pytest.mark.slow
def test_cpu_flow_trains_kills_resumes_and_benchmarks(tpsa_shards, tmp_path, capsys):
    assert main(["--cpu", "--shards", str(tpsa_shards), "--out", str(tmp_path), "--bench-models", "egt-small"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "backend gloo" in out and "all checks passed" in out, out
    assert "killed at step" in out and "egt-small" in out and "MFU -" in out  # no peak FLOP/s known for a CPU
    reference = train_losses(tmp_path / "reference")
    resumed = train_losses(tmp_path / "resumed")
    assert sorted(reference) == sorted(resumed) == list(range(1, 7))
    assert all(resumed[s] == reference[s] for s in range(4, 7))  # exact on the CPU
