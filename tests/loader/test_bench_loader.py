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
