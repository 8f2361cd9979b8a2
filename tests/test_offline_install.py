"""launch/wheel-bundle and launch/offline-install (gtscale on a node without internet access): their
help, what a bundle holds, their refusals, and an install that finds only the bundle (no index)."""

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def launch(script: str, *argv: str, **env: str) -> subprocess.CompletedProcess:
    """A launch script as a user runs it, on this venv unless GTSCALE_VENV says otherwise."""
    return subprocess.run([str(REPO / "launch" / script), *argv], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"GTSCALE_VENV": str(Path(sys.executable).parents[1])} | env)


def bundle(folder: Path, python: str) -> Path:
    folder.mkdir()
    (folder / "gtscale-wheel-bundle.json").write_text(json.dumps({"created_by": "launch/wheel-bundle", "python": python}))
    return folder


def test_help_says_what_each_is_for():
    for script in ("wheel-bundle", "offline-install"):
        result = launch(script, "--help")
        assert result.returncode == 0 and "air-gapped HPC clusters" in result.stdout, result.stderr


def test_the_bundle_holds_this_venvs_versions_of_every_dependency():
    result = launch("wheel-bundle", "--list")
    assert result.returncode == 0, result.stderr
    plan = result.stdout.splitlines()
    for name in ("deepspeed", "rdkit", "webdataset", "ogb", "numpy", "pytest", "molsets"):
        assert f"pin {name}=={md.version(name)}" in plan, plan
    assert f"torch torch=={md.version('torch').split('+')[0]}" in plan  # with its own dependencies, no local label
    assert "build setuptools>=68" in plan  # gtscale itself installs from the clone
    assert not any(line.split()[1].startswith("gtscale") for line in plan)

    lean = launch("wheel-bundle", "--list", "--without", "torch", "--without", "rdkit").stdout.splitlines()
    assert not any(line.startswith(("torch ", "pin rdkit==")) for line in lean) and len(lean) == len(plan) - 2


def test_wheel_bundle_refuses_a_folder_it_did_not_write_and_a_bad_version(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    result = launch("wheel-bundle", "--out", str(tmp_path))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"wheel-bundle: --out {tmp_path} holds files wheel-bundle did not write; choose a new or empty folder"], result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    result = launch("wheel-bundle", "--out", str(tmp_path / "new"), "--python-version", "311")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "wheel-bundle: --python-version must look like 3.11, got 311"], result.stderr


def test_offline_install_refuses_what_is_not_a_bundle_for_this_python(tmp_path):
    venv = {"GTSCALE_VENV": str(tmp_path / "venv")}
    (tmp_path / "plain").mkdir()
    result = launch("offline-install", "--wheels", str(tmp_path / "plain"), **venv)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"offline-install: --wheels {tmp_path / 'plain'}: no gtscale-wheel-bundle.json (not a folder launch/wheel-bundle wrote)"]
    result = launch("offline-install", "--wheels", str(bundle(tmp_path / "old", "3.0")), **venv)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"offline-install: --wheels {tmp_path / 'old'} holds wheels for Python 3.0, "), result.stderr
    assert not (tmp_path / "venv").exists()


def test_offline_install_looks_for_wheels_in_the_bundle_only(tmp_path):
    """An empty bundle: the venv is created, and pip, with no index to ask, finds no torch there."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    result = launch("offline-install", "--wheels", str(bundle(tmp_path / "empty", python)), GTSCALE_VENV=str(tmp_path / "venv"),
                    PYTHON=sys.executable)
    assert result.returncode not in (0, 2) and "torch==" in result.stderr, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (f"offline-install: installing from {tmp_path / 'empty'} failed (the message above says why; "
                                                      "for a missing wheel, pack the bundle again with launch/wheel-bundle)")
    assert (tmp_path / "venv" / "bin" / "python").exists() and not (tmp_path / "venv" / ".gtscale-installed").exists()
