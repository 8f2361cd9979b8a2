"""The reporting commands run end to end: benchmarks write the JSON they print, plot draws a PNG."""

import json

import pytest

from gtscale.cli import main


def test_bench_shard_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "shard", "--limit", "300", "--rounds", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {r["stage"]: r for r in result["rows"]}
    assert rows["ogb smiles2graph"]["vs_smiles2graph"] == pytest.approx(1.0)
    assert result["full_path_vs_smiles2graph"] == pytest.approx(rows["gtscale full path"]["vs_smiles2graph"])
    assert all(r["mol_per_s"] > 0 for r in result["rows"])
    assert "gtscale full path" in capsys.readouterr().out


def test_bench_shard_whole_process_json(tmp_path, capsys):
    """Both processes run to completion (check=True: the gtscale one shards the PCQM4Mv2-layout
    folder the bench writes, with the real reader) and the ratios are those of the rows."""
    out = tmp_path / "whole.json"
    assert main(["bench", "shard", "--whole-process", "200", "--rounds", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    base, ours = result["rows"]
    assert (base["process"], ours["process"]) == ("smiles2graph process", "gtscale shard process")
    assert result["ratio_cpu"] == pytest.approx(base["cpu_s"] / ours["cpu_s"])
    assert all(r["cpu_s"] > 0 and r["wall_s"] > 0 for r in result["rows"])
    # start-up runs on 100 of the 200 molecules: CPU s = start-up + 100 further molecules' worth
    for row in result["rows"]:
        assert row["cpu_s"] == pytest.approx(row["cpu_s_100_molecules"] + 100 * row["cpu_ms_per_further_molecule"] / 1e3)
    assert result["startup_molecules"] == 100
    assert "by CPU time" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_train_json(tmp_path, monkeypatch):
    out = tmp_path / "train.json"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert main(["bench", "train", "--steps", "3", "--rounds", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["loop_graphs_per_s"] > 0 and result["model_alone_graphs_per_s"] > 0
    assert result["loop_vs_model_alone"] == pytest.approx(result["loop_graphs_per_s"] / result["model_alone_graphs_per_s"])
    assert result["warmup_steps"] == 5 and result["compiled"] is False and result["batch_shapes"] is None  # eager: no shape to wait for


def test_bench_train_warms_a_compiled_model_up_until_no_new_shape_comes():
    """The warm-up's rule on a stand-in whose k-th step meets the k-th entry of `shapes` (a compiled
    step costs minutes on a CPU; the real loop is test_bench_train_json's): every bucket met before
    the timed rounds, so that none of them is timed with its compilation."""
    from types import SimpleNamespace

    from gtscale.bench.train import _warm_up

    class Stepper:
        def __init__(self, shapes, compiled=True):
            self.cfg = SimpleNamespace(compile=SimpleNamespace(enabled=compiled))
            self.shapes, self.seen, self.steps = shapes, set(), 0

        @property
        def batch_shapes(self):
            return len(self.seen)

        def train_step(self, batches):
            self.seen.add(self.shapes[self.steps % len(self.shapes)])
            self.steps += 1

    late = Stepper([1] * 11 + [2] + [1] * 100)  # a second bucket first met at step 12
    assert _warm_up(late, None, 20) == 32 and late.batch_shapes == 2  # 12, then 20 quiet steps
    assert _warm_up(Stepper([1] * 11 + [2] + [1] * 100, compiled=False), None, 20) == 5
    assert _warm_up(Stepper(list(range(1000))), None, 20) == 400  # shapes that never settle: at most 20 × steps


def test_plot_draws_the_curves_of_a_resumed_run(tmp_path):
    from gtscale.train.plot import read_metrics

    rows = [{"step": s, "split": "train", "loss": 1.0 / s, "lr": 0.001} for s in range(1, 6)]
    rows += [{"step": 3, "split": "train", "loss": 0.5, "lr": 0.001}]  # a resumed run repeats step 3
    rows += [{"step": 5, "split": "valid", "mae": 2.0, "samples": 10}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    series = read_metrics(tmp_path / "metrics.jsonl")
    assert dict(series["train"]["loss"])[3] == 0.5 and len(series["train"]["loss"]) == 5


def test_plot_names_a_bad_line(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 1}\nnot json\n')
    assert main(["plot", str(tmp_path)]) == 2
    assert "metrics.jsonl:2" in capsys.readouterr().err


def test_plot_leaves_memory_bytes_off_the_metric_axis(tmp_path):
    """The trainer logs optimizer-state sizes (bytes) as split "memory"; on the evaluation axis they
    flattened the MAE curve to a line at zero."""
    from gtscale.train.plot import draw, read_metrics

    rows = [{"step": s, "split": "train", "loss": 1.0 / s, "lr": 0.001} for s in range(1, 11)]
    rows += [{"step": 1, "split": "memory", "optimizer_state_bytes_rank0": 3_000_000, "optimizer_state_bytes_rank1": 3_000_000}]
    rows += [{"step": s, "split": "valid", "mae": 10.0 / s, "mean_predictor_mae": 12.0, "samples": 100} for s in (5, 10)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluation = draw(read_metrics(tmp_path / "metrics.jsonl")).axes[1]
    assert sorted(line.get_label() for line in evaluation.get_lines()) == ["valid mae", "valid mean_predictor_mae"]
    assert evaluation.get_ylim()[1] < 20  # the MAE scale, not millions of bytes
    assert main(["plot", str(tmp_path)]) == 0 and (tmp_path / "curves.png").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_a_missing_export_or_input_is_refused_before_torch_is_imported(tmp_path):
    """predict's path errors come from the command line's own checks, before its imports (torch)."""
    import subprocess
    import sys

    (tmp_path / "in.csv").write_text("smiles\nCCO\n")
    probe = ("import sys; from gtscale.cli import main; code = main(sys.argv[1:]); print(code, 'torch' in sys.modules)")
    for export, source in ((tmp_path / "missing", tmp_path / "in.csv"), (tmp_path, tmp_path / "missing.csv")):
        done = subprocess.run([sys.executable, "-c", probe, "predict", str(export), "--input", str(source), "--out", str(tmp_path / "o.csv")],
                              capture_output=True, text=True)
        assert done.stdout.split() == ["2", "False"] and ("no such export folder" in done.stderr or "source file not found" in done.stderr)
