"""launch/gpu-speed: its refusal without CUDA, and its last step (gtscale.bench.gpu_speed) on what a
real `gtscale bench model --profile` wrote. `launch/gpu-speed --cpu-smoke` runs the whole sequence,
but compiling on a CPU takes minutes: too long for the suite."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from gtscale.bench.gpu_speed import main as summarize
from gtscale.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    env = os.environ | {"GTSCALE_VENV": str(Path(sys.executable).parents[1]), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([str(REPO / "launch" / "gpu-speed"), "--out", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu-speed: no CUDA device visible (--cpu-smoke runs the same sequence on the CPU)"], result.stderr
    assert not (tmp_path / "out").exists()


def test_summary_tables_profiles_and_status(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "model.yaml").parent.mkdir()
    (work / "model.yaml").write_text(yaml.safe_dump({"name": "egt", "num_layers": 2, "node_width": 16, "edge_width": 8, "num_heads": 4, "svd_rank": 4}))
    assert main(["bench", "model", "--model", str(work / "model.yaml"), "--batch-size", "4", "--precision", "fp32", "--steps", "1",
                 "--warmup", "0", "--pad-to", "20", "--threads", "1", "--json", str(work / "bench-model-4.json"),
                 "--profile", str(work / "profile-model.md")]) == 0
    (work / "steps.tsv").write_text("bench model-4\tok\t12\nbench model-8\ttimed out after 150 s\t150\ngpu-check --compile\tok\t90\n")
    log = tmp_path / "gpu-speed.log"
    log.write_text("[gpu-speed] bench model-4 (at most 150 s)\n      not gpu-check's\n"
                   "[gpu-speed] gpu-check --compile (at most 240 s)\n[1/3] train nci-tpsa\nUserWarning: noise\n"
                   "      backend nccl; loss step 1 0.6 → step 50 0.3\ngpu-check: all checks passed in 90 s\n"
                   "[gpu-speed] bench model-8 (at most 150 s)\n")
    capsys.readouterr()

    assert summarize(["--work", str(work), "--out", str(out), "--log", str(log), "--seconds", "252"]) == 1  # a step timed out
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "gpu-profile.md", "summary.md"]
    text = (out / "summary.md").read_text()
    assert "| bench model-8 | timed out after 150 s | 150 |" in text
    assert "| model | 4 | model |" in text  # the one benchmark that wrote figures
    assert "```\n[1/3] train nci-tpsa\n      backend nccl; loss step 1 0.6 → step 50 0.3\ngpu-check: all checks passed in 90 s\n```" in text
    assert text.split("\n", 1)[1] in capsys.readouterr().out  # printed too
    profile = (out / "gpu-profile.md").read_text()
    assert "\n## Profile of one training step" in profile and "\n### " in profile and "aten::" in profile
    figures = json.loads((out / "bench.json").read_text())
    assert figures["seconds"] == 252 and [r["file"] for r in figures["runs"]] == ["bench-model-4.json"]
    assert figures["runs"][0]["results"][0]["profile"]["rows"]

    (work / "steps.tsv").write_text("bench model-4\tok\t12\n")
    assert summarize(["--work", str(work), "--out", str(out), "--log", str(log)]) == 0  # replaces its own files
