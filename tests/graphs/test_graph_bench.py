"""`gtscale bench graph` runs end to end on a small generated graph and reports every figure
(speed targets are the benchmark's business, never asserted here)."""

import json

from gtscale.cli import main


def test_bench_graph_reports_every_figure(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "graph", "--nodes", "3000", "--edges", "20000", "--ego-targets", "300", "--baseline-targets", "10",
            "--shard-targets", "100", "--workdir", str(tmp_path), "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["graph"]["nodes"] == 3000 and 0 < report["graph"]["undirected_edges"] <= 20000
    assert report["build_s"] > 0 and report["build_peak_rss_gib"] > 0 and report["open_s"] > 0
    ego = report["ego"]
    assert ego["with_structure_per_s"] <= ego["sample_per_s"] and ego["vs_baseline"] > 0 and ego["mean_nodes"] <= 64
    assert report["induced"]["nodes"] == 150 and report["induced"]["edges"] >= 0
    assert report["ego_shard_records_per_s"] > 0 and report["ego_shard_records_per_cpu_s"] > 0 and ego["with_structure_per_cpu_s"] > 0
    assert set(report["projected_ego_all_tsocial_nodes_s"]) == {"2", "64"}
    assert set(report["targets_met"]) == {"build_s", "build_peak_rss_gib", "open_s", "ego_per_s_per_core", "induced_5pct_s",
                                          "ego_shard_records_per_s_per_core"}
    printed = capsys.readouterr().out
    assert "scipy + Python BFS" in printed and "projected" in printed and "load average" in printed
    assert list(tmp_path.iterdir()) == [out]  # the generated graph and store are cleaned up
