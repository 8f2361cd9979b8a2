"""launch/gpu-pretrain (issue 18's GPU pretraining in one device run) and launch/device-setup: the
whole sequence on the CPU (`--cpu-smoke`: a few hundred MOSES molecules, one pass), the refusals,
and the step arithmetic."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gtscale.bench.gpu_pretrain import SLOTS_PER_MOLECULE, pass_steps
from gtscale.models.export import load_exported

REPO = Path(__file__).resolve().parents[1]
#: The CSVs inside the molsets package (launch/env.sh installs it without its dependencies, so it
#: cannot be imported, only found).
MOSES = Path(importlib.util.find_spec("moses").submodule_search_locations[0]) / "dataset" / "data"


def launch_env(**extra: str) -> dict:
    return os.environ | {"GTSCALE_VENV": str(Path(sys.executable).parents[1])} | extra


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    result = subprocess.run([str(REPO / "launch" / "gpu-pretrain"), "--out", str(tmp_path / "out"), "--moses", str(MOSES)],
                            env=launch_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu-pretrain: no CUDA device visible (--cpu-smoke runs the same sequence on the CPU)"], result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_without_the_moses_files_is_one_line(tmp_path):
    (tmp_path / "moses").mkdir()
    (tmp_path / "moses" / "train.csv.gz").write_bytes(b"")
    result = subprocess.run([str(REPO / "launch" / "gpu-pretrain"), "--cpu-smoke", "--out", str(tmp_path / "out"), "--moses", str(tmp_path / "moses")],
                            env=launch_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"gpu-pretrain: --moses {tmp_path / 'moses'}: no test.csv.gz (launch/device-bundle packs them into .device/moses)"], result.stderr


def test_a_keep_folder_that_gtscale_did_not_write_is_refused_and_left_alone(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "steps.tsv").write_text("my notes\n")
    result = subprocess.run([str(REPO / "launch" / "gpu-pretrain"), "--cpu-smoke", "--out", str(tmp_path / "out"), "--moses", str(MOSES),
                             "--keep", str(tmp_path / "mine")], env=launch_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"gpu-pretrain: --keep {tmp_path / 'mine'} holds files gpu-pretrain did not write; choose a new or empty folder"], result.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["steps.tsv"] and (tmp_path / "mine" / "steps.tsv").read_text() == "my notes\n"


def test_device_setup_without_a_bundle_is_one_line(tmp_path):
    """Run from a copy of the launch folder, whose repository has no .device/wheels."""
    (tmp_path / "launch").mkdir()
    script = tmp_path / "launch" / "device-setup"
    script.write_bytes((REPO / "launch" / "device-setup").read_bytes())
    script.chmod(0o755)
    result = subprocess.run([str(script)], env=launch_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"device-setup: no wheels in {tmp_path / '.device' / 'wheels'} (run launch/device-bundle here and carry .device)"], result.stderr


def test_steps_cover_the_passes_asked_for(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"splits": {"train": {"samples": 1_584_663}}}))
    steps = pass_steps(tmp_path, 16384, 1)
    assert steps == -(-1_584_663 * SLOTS_PER_MOLECULE // 16384) and steps * 16384 >= 1_584_663 * SLOTS_PER_MOLECULE
    assert pass_steps(tmp_path, 16384, 2) in (2 * steps - 1, 2 * steps)


@pytest.mark.slow
def test_cpu_smoke_shards_pretrains_one_pass_exports_and_a_second_run_goes_on(tmp_path):
    keep, out, again = tmp_path / "keep", tmp_path / "out", tmp_path / "again"
    argv = [str(REPO / "launch" / "gpu-pretrain"), "--cpu-smoke", "--moses", str(MOSES), "--keep", str(keep)]
    result = subprocess.run([*argv, "--out", str(out)], env=launch_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    assert "| shard | ok |" in summary and "| pretrain | ok |" in summary and "| export | ok |" in summary, summary
    assert "380 molecules (test 40, test_scaffolds 40, train 300)" in summary, summary
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in rows if r["split"] == "train"][-1]["epoch"] == 1  # one pass over the 300 training molecules, as planned
    assert any(r["split"] == "test" and r["mae"] < 1.0 for r in rows)  # z-scored descriptors: the mean predictor's MAE is ~0.8
    model, _ = load_exported(out / "export")
    assert sum(p.numel() for p in model.parameters()) > 500_000 and (out / "export" / "model.pt").stat().st_size < 16 * 2**20

    # A second device call on the kept folder: the shards are reused, training resumes from its checkpoint.
    shards = sorted(p.stat().st_mtime_ns for p in (keep / "shards").rglob("*.tar"))
    result = subprocess.run([*argv, "--out", str(again), "--passes", "2"], env=launch_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(p.stat().st_mtime_ns for p in (keep / "shards").rglob("*.tar")) == shards
    rows = [json.loads(line) for line in (again / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["split"] == "train"]
    assert [r for r in rows if r["split"] == "train"][-1]["epoch"] == 2 and steps[-1] == 26
    assert len(steps) == len(set(steps))  # the steps of the first run were not trained again


def test_shards_without_a_manifest_are_refused_in_one_line(tmp_path):
    """--shards takes a finished shard folder (launch/gpu-lease's); an unfinished one is refused
    before anything runs, and the MOSES CSVs are not needed with it."""
    (tmp_path / "shards").mkdir()
    result = subprocess.run([str(REPO / "launch" / "gpu-pretrain"), "--cpu-smoke", "--out", str(tmp_path / "out"), "--moses", str(tmp_path / "none"),
                             "--shards", str(tmp_path / "shards")], env=launch_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"gpu-pretrain: --shards {tmp_path / 'shards'}: no manifest.json (not a finished gtscale shard folder)"], result.stderr
    assert not (tmp_path / "out").exists()
