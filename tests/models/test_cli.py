"""`gtscale model-info` and `gtscale bench model`, end to end through the CLI."""

import json
import subprocess
import sys

import pytest
import yaml

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.models import build_model

from model_fixtures import TINY_EGT, TINY_ET, TINY_ET_SPARSE, TINY_GRAPHORMER, TINY_MNAGT


def test_model_info_prints_counts(capsys):
    assert main(["model-info", "egt-small"]) == 0
    out = capsys.readouterr().out
    assert "11,463,809" in out and "virtual_nodes" in out and "layers" in out


def test_model_info_bad_key(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**TINY_EGT, "num_layer": 3}))
    assert main(["model-info", str(path)]) == 2
    err = capsys.readouterr().err
    assert "num_layer: unknown key" in err and len(err.strip().splitlines()) == 1


def test_build_model_rejects_unknown_names_and_bad_values():
    with pytest.raises(UserError, match="'gat' is not a model"):
        build_model({"name": "gat"})
    with pytest.raises(UserError, match="num_heads"):
        build_model({**TINY_EGT, "num_heads": 3})


@pytest.mark.parametrize("cfg", [TINY_EGT, TINY_GRAPHORMER], ids=["egt", "graphormer"])
def test_bench_model_runs_and_writes_json(tmp_path, capsys, cfg):
    model_path, json_path = tmp_path / "tiny.yaml", tmp_path / "out.json"
    model_path.write_text(yaml.safe_dump(cfg))
    argv = ["bench", "model", "--model", str(model_path), "--batch-size", "4", "--precision", "fp32",
            "--steps", "1", "--warmup", "0", "--pad-to", "20", "--threads", "1", "--json", str(json_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "graphs/s" in out and "padded N = 20" in out
    figures = json.loads(json_path.read_text())
    (result,) = figures["results"]
    assert result["graphs_per_s"] > 0 and result["gflop_per_step"] > 0 and result["peak_mem_mb"] > 0
    assert figures["setup"]["padded_nodes"] == 20 and figures["setup"]["threads"] == 1


def test_bench_model_times_kernel_selections_side_by_side(tmp_path, capsys):
    model_path, json_path = tmp_path / "tiny.yaml", tmp_path / "out.json"
    model_path.write_text(yaml.safe_dump({**TINY_EGT, "attention_dropout": 0.3}))
    argv = ["bench", "model", "--model", str(model_path), "--batch-size", "4", "--precision", "fp32", "--kernels", "fast", "reference",
            "--steps", "1", "--warmup", "0", "--threads", "1", "--json", str(json_path)]
    assert main(argv) == 0
    assert "fp32 model: kernels reference / fast throughput" in capsys.readouterr().out
    figures = json.loads(json_path.read_text())
    assert [r["kernels"] for r in figures["results"]] == ["fast", "reference"]
    (ratio,) = figures["setup"]["kernel_ratios"]
    assert ratio["kernels"] == "reference" and ratio["against"] == "fast" and ratio["speedup"] > 0

    assert main([*argv[:-2], "--kernels", "fast", "flash", "--json", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "'flash'" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize("cfg", [TINY_ET, TINY_MNAGT], ids=["et", "mnagt"])
def test_bench_model_times_the_plain_implementation_too(tmp_path, capsys, cfg):
    model_path, json_path = tmp_path / "tiny.yaml", tmp_path / "out.json"
    model_path.write_text(yaml.safe_dump(cfg))
    argv = ["bench", "model", "--model", str(model_path), "--batch-size", "4", "--precision", "fp32",
            "--steps", "1", "--warmup", "0", "--threads", "1", "--json", str(json_path)]
    assert main(argv) == 0
    assert "model / plain throughput" in capsys.readouterr().out
    figures = json.loads(json_path.read_text())
    assert [r["implementation"] for r in figures["results"]] == ["model", "plain"]
    assert figures["setup"]["ratios"][0]["speedup"] > 0


def test_bench_model_on_a_generated_graph(tmp_path, capsys):
    model_path, json_path = tmp_path / "tiny.yaml", tmp_path / "out.json"
    model_path.write_text(yaml.safe_dump({**TINY_ET_SPARSE, "node_vocab": [], "node_float_dim": 4}))
    argv = ["bench", "model", "--model", str(model_path), "--nodes", "300", "--edges", "2000", "--precision", "fp32",
            "--steps", "1", "--warmup", "0", "--threads", "1", "--json", str(json_path)]
    assert main(argv) == 0
    assert "generated graph, 300 nodes, 2,000 random edges" in capsys.readouterr().out
    figures = json.loads(json_path.read_text())
    assert figures["setup"]["graph"] == "generated" and all(r["nodes_per_s"] > 0 for r in figures["results"])


def names_of(section: str) -> list[str]:
    return [line.split("|")[2].strip(" `") for line in section.splitlines() if line.startswith("| ") and not line.startswith("| #")]


@pytest.mark.slow
@pytest.mark.xdist_group("inductor")  # one worker compiles (conftest.py)
def test_bench_model_profiles_one_step_per_row(tmp_path, capsys):
    model_path, profile = tmp_path / "tiny.yaml", tmp_path / "profile.md"
    # one layer, no SVD encodings or edge outputs: the fewest kernels for inductor to build (a C++ build each)
    model_path.write_text(yaml.safe_dump({**TINY_EGT, "num_layers": 1, "num_virtual_nodes": 1, "svd_rank": 0, "output_edges": False}))
    argv = ["bench", "model", "--model", str(model_path), "--batch-size", "4", "--precision", "fp32", "--compile",
            "--steps", "1", "--warmup", "0", "--pad-to", "20", "--threads", "1", "--profile", str(profile), "--json", str(tmp_path / "out.json")]
    # Every operator listed: which ones make a tiny step's top 15 depends on the machine's timing
    # (on CI's, a tiny compiled step's top 15 held no matrix product). A private cache: a cold compile.
    # A process of its own, as a user runs it: its measuring worker ends cleanly, leaving no
    # semaphore of inductor's compile workers to the resource tracker's warning at exit.
    run = subprocess.run([sys.executable, "-m", "gtscale.cli", *argv, "--profile-rows", "10000", "--compile-cache", str(tmp_path / "inductor")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "leaked" not in run.stderr, run.stderr
    text = profile.read_text()
    assert "fp32 · model" in text and "fp32 · compiled" in text, text
    eager_text, compiled_text = text.split("fp32 · compiled")
    assert {"aten::addmm", "aten::mm", "aten::bmm"} & set(names_of(eager_text)), eager_text  # the step's matrix products
    # the compiled row names inductor's generated kernels, not one opaque compiled-graph call
    assert any("cpp_fused_" in name for name in names_of(compiled_text)), compiled_text
    assert "cpp_fused_" not in eager_text
    eager, compiled = json.loads((tmp_path / "out.json").read_text())["results"]
    assert eager["profile"]["calls"] > 100 and [r["name"] for r in eager["profile"]["rows"]] == names_of(eager_text)

    eager_only = [a for a in argv if a != "--compile"]
    assert main(eager_only) == 0
    text = profile.read_text()
    assert "fp32 · compiled" not in text  # a rerun replaces its own report
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert len(rows) == 15, text
    shares = [float(r[4]) for r in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.05

    other = tmp_path / "notes.md"
    other.write_text("# my notes\n")
    assert main(eager_only[:-4] + ["--profile", str(other)]) == 2
    assert "would replace a file gtscale did not write" in capsys.readouterr().err and other.read_text() == "# my notes\n"


def test_bench_model_refuses_cuda_graphs_without_a_cuda_device(tmp_path, capsys):
    model_path, json_path = tmp_path / "tiny.yaml", tmp_path / "out.json"
    model_path.write_text(yaml.safe_dump(TINY_EGT))
    argv = ["bench", "model", "--model", str(model_path), "--device", "cpu", "--cuda-graphs", "--json", str(json_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--cuda-graphs" in err and "cpu" in err and len(err.strip().splitlines()) == 1
    assert not json_path.exists()
