"""The README's main command, end to end (shorter schedule): it must beat the mean predictor clearly."""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_beats_the_mean_predictor(tmp_path):
    env = os.environ | {"GTSCALE_SHARDS": str(tmp_path / "shards"), "GTSCALE_RUNS": str(tmp_path / "runs")}
    result = subprocess.run(
        [str(REPO / "launch" / "quickstart"), "schedule.total_steps=100", "schedule.warmup_steps=10", "logging.progress=false"],
        env=env, capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"quickstart: valid MAE ([0-9.]+) \(mean-predictor MAE ([0-9.]+)\)", last)
    assert match, last
    mae, baseline = map(float, match.groups())
    assert mae < 0.5 * baseline
    run = next((tmp_path / "runs").glob("quickstart-*"))
    assert (run / "curves.png").is_file() and (run / "metrics.jsonl").is_file() and (run / "best.json").is_file()
