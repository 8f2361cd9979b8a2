"""`gtscale bench shard --whole-process N --also-tree DIR`: another checkout's sharder in the same
rounds, so a change's before/after figures come from one run on a noisy machine."""

import json
from pathlib import Path

import pytest

from gtscale.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_also_tree_adds_a_row_timed_in_the_same_rounds(tmp_path, capsys):
    out = tmp_path / "whole.json"
    assert main(["bench", "shard", "--whole-process", "110", "--rounds", "1", "--also-tree", str(REPO), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    base, ours, other = result["rows"]
    assert (base["process"], ours["process"]) == ("smiles2graph process", "gtscale shard process")
    assert other["process"] == f"gtscale shard process from {REPO}"
    for row in (ours, other):  # each sharder row: smiles2graph's CPU seconds ÷ its own
        assert row["cpu_s"] > 0 and row["ratio_cpu"] == pytest.approx(base["cpu_s"] / row["cpu_s"])
    assert result["ratio_cpu"] == pytest.approx(ours["ratio_cpu"])
    assert f"from {REPO}" in capsys.readouterr().out
