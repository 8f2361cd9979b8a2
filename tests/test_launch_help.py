"""Every script in launch/ that a user runs answers --help with what it does, and exits 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: launch/env.sh is sourced by the others, never run.
SCRIPTS = sorted(p.name for p in (REPO / "launch").iterdir() if p.name != "env.sh")


def test_every_launch_file_but_env_sh_is_an_executable_script():
    assert SCRIPTS and all(os.access(REPO / "launch" / name, os.X_OK) for name in SCRIPTS), SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    result = subprocess.run([str(REPO / "launch" / script), "--help"], capture_output=True, text=True, timeout=120,
                            env=os.environ | {"GTSCALE_VENV": str(Path(sys.executable).parents[1])})
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) >= 3, result.stdout  # more than a usage line
