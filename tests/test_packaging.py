"""An installed (non-editable) gtscale carries its presets and its pretrained backbone: `model:
egt-small`, `deepspeed: zero2`, the task configs and `moses-egt` resolve without the source tree."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import gtscale, pathlib, sys
from gtscale.models import load_model_config
from gtscale.train.config import DEEPSPEED_PRESETS
assert pathlib.Path(gtscale.__file__).is_relative_to(pathlib.Path(sys.argv[1])), gtscale.__file__
assert load_model_config("egt-small")["node_width"] == 512
assert (DEEPSPEED_PRESETS / "zero2.yaml").is_file()
from gtscale.models.export import read_export
from gtscale.models.pretrained import export_path, shipped
assert "moses-egt" in shipped(), shipped()
assert read_export(export_path("moses-egt")).config["name"] == "egt"
print("ok")
"""


def test_a_built_wheel_ships_the_configs(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(REPO)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("gtscale-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gtscale/configs/models/egt-small.yaml" in names
    assert "gtscale/configs/deepspeed/zero2.yaml" in names
    assert "gtscale/configs/tasks/nci-tpsa.yaml" in names
    assert {f"gtscale/pretrained/moses-egt/{f}" for f in ("model.pt", "model.yaml", "export.json", "README.md")} <= set(names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = subprocess.run([sys.executable, "-c", PROBE, str(site)], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
