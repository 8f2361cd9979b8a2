"""launch/gpu-check: its loss comparison, its budget, its refusals, its report, and its whole flow
on 2 CPU processes (`--cpu`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gtscale.bench.gpu_check import max_relative_difference, train_losses
from gtscale.cli.gpu_check import main
from gtscale.bench.gpu_report import StepRecord, write_report
from gtscale.cli import main as gtscale

REPO = Path(__file__).resolve().parents[2]


def launch(*argv: str, **env: str) -> subprocess.CompletedProcess:
    """launch/gpu-check as a user runs it, on this venv."""
    return subprocess.run([str(REPO / "launch" / "gpu-check"), *argv], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"GTSCALE_VENV": str(Path(sys.executable).parents[1])} | env)


def test_loss_comparison_finds_the_worst_step_and_missing_ones(tmp_path):
    rows = [{"step": 1, "split": "train", "loss": 2.0}, {"step": 2, "split": "train", "loss": 1.0}, {"step": 2, "split": "valid", "mae": 9.0},
            {"step": 2, "split": "train", "loss": 1.5}]  # a resumed run repeats step 2: the last row counts
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    resumed = train_losses(tmp_path)
    assert resumed == {1: 2.0, 2: 1.5}
    assert max_relative_difference(resumed, {1: 2.0, 2: 1.0}, range(1, 3)) == (0.5, 2)
    assert max_relative_difference(resumed, {1: 2.0, 2: 1.5}, range(1, 3)) == (0.0, 1)
    assert max_relative_difference(resumed, {1: 2.0}, range(1, 3)) == (float("inf"), 2)


def test_help_names_the_budget_and_the_folder():
    result = launch("--help")
    assert result.returncode == 0 and "--budget" in result.stdout and "--out" in result.stdout, result.stderr


def test_without_cuda_it_refuses_in_one_line_and_writes_nothing(tmp_path):
    result = launch("--out", str(tmp_path / "out"), CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu-check: no CUDA device visible (--cpu runs the same flow on the CPU)"], result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_holding_files_is_refused_and_left_alone(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("my notes\n")
    assert main(["--cpu", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"gpu-check: {tmp_path}: --out must be a new or empty folder"]
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_a_step_that_would_start_with_too_little_budget_is_skipped_and_fails_the_check(tmp_path, tpsa_shards, capsys):
    """Under a minute of budget: nothing starts, every step is reported skipped, exit 1."""
    assert main(["--cpu", "--shards", str(tpsa_shards), "--out", str(tmp_path / "out"), "--bench-models", "egt-small", "--budget", "30"]) == 1
    summary = (tmp_path / "out" / "summary.md").read_text()
    for step in ("train", "resume", "bench egt-small 2"):
        assert f"| {step} | skipped: " in summary, summary
    assert not (tmp_path / "out" / "reference").exists()
    assert "FAILED: train, resume, bench egt-small 2" in capsys.readouterr().out


def test_report_tables_profiles_and_status(tmp_path):
    """write_report on what a real `gtscale bench model --json --profile` wrote."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "model.yaml").write_text(yaml.safe_dump({"name": "egt", "num_layers": 2, "node_width": 16, "edge_width": 8, "num_heads": 4, "svd_rank": 4}))
    assert gtscale(["bench", "model", "--model", str(work / "model.yaml"), "--batch-size", "4", "--precision", "fp32", "--steps", "1",
                    "--warmup", "0", "--pad-to", "20", "--threads", "1", "--json", str(work / "bench-model-4.json"),
                    "--profile", str(work / "profile-model-4.md")]) == 0
    steps = [StepRecord("train", "ok", 12.0), StepRecord("bench model 4", "ok", 9.0), StepRecord("bench model 8", "timed out after 150 s", 150.0)]
    text = write_report(out, "cpu", 600, steps, ["train nci-tpsa", "      backend gloo"], [work / "bench-model-4.json", work / "bench-model-8.json"],
                        [work / "profile-model-4.md"])
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "profile.md", "summary.md"]
    assert (out / "summary.md").read_text().endswith(text)
    assert text.startswith("# launch/gpu-check on cpu (torch ") and ": 171 s of a 600 s budget" in text
    assert "| bench model 8 | timed out after 150 s | 150 |" in text
    assert "| model | 4 | model |" in text  # the one benchmark that wrote figures
    assert "```\ntrain nci-tpsa\n      backend gloo\n```" in text
    profile = (out / "profile.md").read_text()
    assert "\n## Profile of one training step" in profile and "\n### " in profile and "aten::" in profile
    figures = json.loads((out / "bench.json").read_text())
    assert [r["file"] for r in figures["runs"]] == ["bench-model-4.json"] and figures["steps"][2]["status"] == "timed out after 150 s"
    assert figures["runs"][0]["results"][0]["profile"]["rows"]


@pytest.mark.slow
def test_cpu_flow_trains_kills_resumes_and_benchmarks(tpsa_shards, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--cpu", "--shards", str(tpsa_shards), "--out", str(out), "--bench-models", "egt-small", "--budget", "1800"]) == 0, \
        capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "backend gloo" in printed and "all checks passed" in printed and "killed at step" in printed, printed
    summary = (out / "summary.md").read_text()
    assert "| train | ok |" in summary and "| resume | ok |" in summary and "| bench egt-small 2 | ok |" in summary, summary
    assert "| egt-small | 2 | model |" in summary and "| - |" in summary  # no peak FLOP/s known for a CPU: no MFU
    assert "aten::" in (out / "profile.md").read_text()
    reference = train_losses(out / "reference")
    resumed = train_losses(out / "resumed")
    assert sorted(reference) == sorted(resumed) == list(range(1, 7))
    assert all(resumed[s] == reference[s] for s in range(4, 7))  # exact on the CPU
