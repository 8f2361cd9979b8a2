"""`gtscale bench graph-sampling` on a small generated graph: every row is trained, scored by sampling
and by full inference, and reported; the temporary store, weights and node states are removed."""

import json

from gtscale.cli import main


def test_every_row_is_trained_and_scored_both_ways(tmp_path, capsys):
    out = tmp_path / "figures.json"
    code = main(["bench", "graph-sampling", "--nodes", "1500", "--edges", "10000", "--neighbour-signal", "0.8", "--fraction", "0.2",
                 "--fanouts", "5,3", "--batch-targets", "64", "--train-cpu-seconds", "1", "--eval-targets", "150",
                 "--model-overrides", "{node_width: 16, num_heads: 2, head_dim: 8, num_memories: 16}", "--workdir", str(tmp_path / "work"),
                 "--json", str(out)])
    assert code == 0
    figures = json.loads(out.read_text())
    rows = figures["rows"]
    assert sorted(rows) == ["fanout", "features-only", "induced"] and figures["graph"]["neighbour_signal"] == 0.8
    for name in ("induced", "fanout"):
        assert rows[name]["train"]["steps"] >= 1 and rows[name]["train"]["cpu_s"] >= 1
        assert rows[name]["sampled"]["targets"] == 150 and 0 <= rows[name]["sampled"]["auroc"] <= 1
        assert rows[name]["full"]["targets"] > 150 and 0 <= rows[name]["full"]["auroc"] <= 1
    assert "fanout" in capsys.readouterr().out
    assert list((tmp_path / "work").iterdir()) == []
