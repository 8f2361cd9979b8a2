"""`gtscale bench loader` runs end to end on a small shard set and reports every row."""

from __future__ import annotations

import json

from gtscale.cli import main


def test_bench_loader_reports_throughput_and_padding(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "loader", "--molecules", "250", "--shard-size", "60", "--node-budget", "512", "--seconds", "0.05", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    rows = {(r["batch"], r["batching"].split(",")[1].strip()): r for r in report["rows"]}
    assert set(rows) == {("EGT", "bucketed"), ("EGT", "random"), ("Graphormer (D=5)", "bucketed"), ("Graphormer (D=5)", "random")}
    for name in ("EGT", "Graphormer (D=5)"):
        assert rows[(name, "bucketed")]["padding_efficiency"] > rows[(name, "random")]["padding_efficiency"]
        assert rows[(name, "bucketed")]["padding_efficiency"] > 0.9
    assert all(r["graphs_per_s"] > 0 for r in report["rows"])
    printed = capsys.readouterr().out
    assert "graphs/s/worker" in printed and "padding eff." in printed


def test_bench_loader_rejects_bad_options(capsys):
    assert main(["bench", "loader", "--molecules", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err


def test_bench_loader_times_worker_processes_as_training_receives_batches(tmp_path, capsys):
    """--workers N: one more EGT row, its batches built in N DataLoader worker processes and
    handed to this one; the rate is shared out per worker and the total kept in the JSON."""
    out = tmp_path / "bench.json"
    argv = ["bench", "loader", "--molecules", "250", "--shard-size", "60", "--node-budget", "512", "--seconds", "0.05",
            "--workers", "2", "--json", str(out)]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 5
    workers = rows[-1]
    assert workers["batch"] == "EGT" and workers["batching"].endswith("bucketed, 2 worker process(es)")
    assert workers["graphs_per_s"] > 0 and workers["total_graphs_per_s"] == 2 * workers["graphs_per_s"]
    assert workers["padding_efficiency"] > 0.9
    assert "2 worker process(es)" in capsys.readouterr().out
    assert main(["bench", "loader", "--workers", "-1"]) == 2
    assert "--workers must be >= 0" in capsys.readouterr().err
