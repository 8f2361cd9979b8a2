"""Sweep aggregation on hand-made runs: mean ± sample std per metric, the Markdown table, the
side-by-side --compare of sweep folders, and the --seeds / overrides split."""

import json

import numpy as np
import pytest

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.cli.sweep import split_seeds
from gtscale.sweep import markdown_table, summarize, write_sweep


def runs(*values: dict) -> list[dict]:
    return [{"seed": s, "metrics": m} for s, m in enumerate(values)]


def test_summary_is_mean_and_sample_std_per_metric_skipping_missing_and_nan():
    summary = summarize(runs({"rmse": 1.0, "mae": 0.5}, {"rmse": 2.0, "mae": float("nan")}, {"rmse": 4.0, "cliff_rmse": 3.0}))
    assert summary["rmse"] == {"mean": pytest.approx(7 / 3), "std": pytest.approx(np.std([1, 2, 4], ddof=1)), "n": 3}
    assert summary["mae"] == {"mean": 0.5, "std": 0.0, "n": 1}
    assert summary["cliff_rmse"]["n"] == 1


def test_markdown_table_has_one_row_per_sweep_rmse_first_and_dashes_for_absent_metrics():
    rows = [{"label": "egt", "summary": summarize(runs({"rmse": 1.0, "mae": 0.4}, {"rmse": 1.5, "mae": 0.6}))},
            {"label": "ecfp", "summary": summarize(runs({"rmse": 0.9, "cliff_rmse": 1.2}))}]
    lines = markdown_table(rows).splitlines()
    assert lines[0] == "| run | rmse | cliff_rmse | mae |"
    assert lines[2] == "| egt | 1.2500 ± 0.3536 (n=2) | – | 0.5000 ± 0.1414 (n=2) |"
    assert lines[3] == "| ecfp | 0.9000 (n=1) | 1.2000 (n=1) | – |"


def test_compare_puts_sweep_folders_side_by_side(tmp_path, capsys):
    write_sweep(tmp_path / "a", [{"label": "scratch", "runs": [], "summary": summarize(runs({"rmse": 1.0}, {"rmse": 3.0}))}])
    write_sweep(tmp_path / "b", [{"label": "finetuned", "runs": [], "summary": summarize(runs({"rmse": 0.5}, {"rmse": 0.7}))}])
    assert json.loads((tmp_path / "a" / "sweep.json").read_text())["rows"][0]["summary"]["rmse"]["mean"] == 2.0
    assert main(["sweep", "--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text()
    assert table == capsys.readouterr().out
    assert "| scratch | 2.0000 ± 1.4142 (n=2) |" in table and "| finetuned | 0.6000 ± 0.1414 (n=2) |" in table


def test_compare_of_a_folder_without_sweep_json_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", "--compare", str(tmp_path)]) == 2
    assert "no sweep.json" in capsys.readouterr().err


def test_seeds_then_overrides_are_told_apart():
    assert split_seeds(["0", "2", "schedule.total_steps=5"], ["a=1"]) == ([0, 2], ["a=1", "schedule.total_steps=5"])
    with pytest.raises(UserError, match="--seeds: 'x' is not a seed"):
        split_seeds(["0", "x"], [])
