"""Which output folders gtscale may write into (gtscale.io.claim_out_dir): new,
empty, or one gtscale wrote (its marker: graph.json, plan.json / manifest.json with gtscale's
fingerprint, export.json); never the input or a folder inside it; a refusal is one line, exit 2,
and leaves every file where it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.io import claim_out_dir, claim_out_file

MARKERS = {"plan.json": lambda plan: plan.get("created_by", "").startswith("gtscale ")}
CSV = "smiles,id,split,y\nCCO,1,train,1\nc1ccccc1,2,train,2\nCC(=O)O,3,test,3\nCCN,4,test,4\n"


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def refused(capsys, argv: list[str], watched: Path, fragment: str) -> None:
    before = files(watched)
    assert main(argv) == 2
    assert fragment in one_error_line(capsys)
    assert files(watched) == before


def smiles_csv(tmp_path: Path, out: Path) -> list[str]:
    (tmp_path / "mols.csv").write_text(CSV)
    return ["shard", "smiles-csv", "--input", str(tmp_path / "mols.csv"), "--id-column", "id", "--split-column", "split",
            "--target-columns", "y", "--out", str(out), "--no-progress", "--lap-k", "0", "--svd-rank", "0"]


# --- the rule ---------------------------------------------------------------------------------------
def test_new_empty_and_own_folders_are_claimed(tmp_path):
    assert claim_out_dir(tmp_path / "new", MARKERS) == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    claim_out_dir(tmp_path / "empty", MARKERS)
    own = tmp_path / "own"
    own.mkdir()
    (own / "plan.json").write_text(json.dumps({"created_by": "gtscale 0.1"}))
    (own / "anything").write_text("written by that run")
    claim_out_dir(own, MARKERS)


def test_a_concurrent_parts_plan_temporary_does_not_make_the_folder_foreign(tmp_path):
    """Parts of a SLURM array start at once: one may see the other's plan.json.<pid>.<tid>.tmp alone."""
    (tmp_path / "plan.json.4242.1.tmp").write_text("{")
    claim_out_dir(tmp_path, MARKERS)


@pytest.mark.parametrize("marker", ['{"created_by": "someone else"}', "not json", "[1, 2]"])
def test_a_marker_gtscale_did_not_write_is_refused(tmp_path, marker):
    (tmp_path / "plan.json").write_text(marker)
    with pytest.raises(UserError, match="holds files gtscale did not write"):
        claim_out_dir(tmp_path, MARKERS)


def test_out_equal_to_or_inside_the_input_is_refused(tmp_path):
    with pytest.raises(UserError, match="is the input"):
        claim_out_dir(tmp_path, MARKERS, [tmp_path])
    with pytest.raises(UserError, match="inside the input"):
        claim_out_dir(tmp_path / "a" / "b", MARKERS, [tmp_path])
    claim_out_dir(tmp_path / "a", MARKERS, [tmp_path / "b", None])


def test_a_file_is_replaced_only_when_gtscale_wrote_it(tmp_path):
    ours = lambda figures: figures.get("created_by") == "gtscale bench x"  # noqa: E731
    (tmp_path / "old.json").write_text(json.dumps({"created_by": "gtscale bench x"}))
    claim_out_file(tmp_path / "old.json", ours, "--json")
    claim_out_file(tmp_path / "new.json", ours, "--json")
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    with pytest.raises(UserError, match="would replace a file gtscale did not write"):
        claim_out_file(tmp_path / "notes.json", ours, "--json")


def test_a_files_mark_is_read_its_own_way_and_an_input_is_never_replaced(tmp_path):
    from gtscale.bench.report import claim_markdown, write_markdown
    from gtscale.io import read_first_line

    write_markdown(tmp_path / "report.md", "| a |\n", "model", "--profile")
    claim_markdown(tmp_path / "report.md", "model", "--profile")  # a Markdown report: its first line
    (tmp_path / "notes.md").write_text("# my notes\n")
    with pytest.raises(UserError, match="--profile would replace a file gtscale did not write; choose a new file name$"):
        claim_markdown(tmp_path / "notes.md", "model", "--profile")
    ours = lambda line: line.endswith(",reason")  # noqa: E731
    with pytest.raises(UserError, match=r"choose a new file name \(or pass --overwrite to replace it\)"):
        claim_out_file(tmp_path / "notes.md", ours, "--out", read_mark=read_first_line, overwrite_flag="--overwrite")
    claim_out_file(tmp_path / "notes.md", ours, "--out", read_mark=read_first_line, overwrite_flag="--overwrite", overwrite=True)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.csv").write_text("smiles\n")
    (tmp_path / "hard.csv").hardlink_to(tmp_path / "in" / "x.csv")
    for out, what in [(tmp_path / "in" / "x.csv", "is the input"), (tmp_path / "hard.csv", "is the input"), (tmp_path / "in" / "y.csv", "inside the input")]:
        with pytest.raises(UserError, match=what):
            claim_out_file(out, ours, "--out", read_mark=read_first_line, inputs=[tmp_path / "in" / "x.csv", tmp_path / "in", None], overwrite=True)


# --- every command that writes a folder -------------------------------------------------------------
def test_shard_keeps_a_foreign_manifest(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"my": "experiment"}')
    refused(capsys, smiles_csv(tmp_path, out), tmp_path, "holds files gtscale did not write (manifest.json;")


def test_shard_keeps_a_users_file_named_like_a_shard(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "train").mkdir(parents=True)
    (out / "train" / "train-000099.tar").write_text("my tar")
    refused(capsys, smiles_csv(tmp_path, out), tmp_path, "holds files gtscale did not write (train;")


def test_rerun_removes_old_shards_but_not_a_users_file_named_like_one(tmp_path, capsys):
    out = tmp_path / "out"
    argv = smiles_csv(tmp_path, out)
    assert main([*argv, "--shard-size", "1"]) == 0
    (out / "train" / "train-000099.tar").write_text("my tar")  # added by hand into gtscale's folder
    assert main([*argv, "--shard-size", "2"]) == 0
    assert not (out / "train" / "train-000001.tar").exists()  # of the earlier plan: removed
    assert (out / "train" / "train-000099.tar").read_text() == "my tar"


def test_shard_graph_ego_out_inside_the_store(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--out", str(store), "--quiet"]) == 0
    capsys.readouterr()
    refused(capsys, ["shard", "graph-ego", "--graph", str(store), "--out", str(store / "shards"), "--no-progress"], tmp_path,
            "--out is inside the input")


def test_graph_build_out_equal_to_its_input(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    np.save(plain / "edges.npy", np.array([[0, 1], [1, 2]], np.int64))
    np.save(plain / "labels.npy", np.array([0, 1, 0], np.int64))
    refused(capsys, ["graph", "build", "plain", "--input", str(plain), "--out", str(plain), "--quiet"], tmp_path, "--out is the input")


def test_graph_build_into_a_results_folder(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    np.save(results / "embeddings_final.npy", np.zeros(3))
    (results / "metrics.json").write_text('{"auc": 0.9}')
    refused(capsys, ["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--out", str(results), "--quiet"], tmp_path,
            "holds files gtscale did not write (embeddings_final.npy, metrics.json; no gtscale graph.json)")


def test_graph_rebuild_replaces_its_own_store(tmp_path, capsys):
    store = tmp_path / "store"
    for seed in ("1", "2"):
        assert main(["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--seed", seed, "--out", str(store), "--quiet"]) == 0
    assert json.loads((store / "graph.json").read_text())["build"]["source"]["seed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # nothing left aside


def test_import_checkpoint_into_a_foreign_folder(tmp_path, capsys):
    (tmp_path / "ckpt.pt").write_bytes(b"not read: the folder is refused first")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    refused(capsys, ["import-checkpoint", "--format", "egt", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")], tmp_path,
            "OUT holds files gtscale did not write (notes.txt; no gtscale export.json or ensemble.json or targets.json)")


def test_write_export_replaces_only_an_export(tmp_path):
    import torch

    from gtscale.models.export import write_export

    state = {"backbone.w": torch.ones(2)}
    write_export(tmp_path / "e", state, {"name": "egt"}, {"source": "a"})
    write_export(tmp_path / "e", state, {"name": "egt"}, {"source": "b"})  # its own export: replaced
    assert json.loads((tmp_path / "e" / "export.json").read_text())["source"] == "b"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("mine")
    with pytest.raises(UserError, match="holds files gtscale did not write"):
        write_export(tmp_path / "run", state, {"name": "egt"}, {})
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]
    # `gtscale evaluate` leaves RUN/export/<tag>/ exports; `gtscale export RUN` then writes RUN/export
    write_export(tmp_path / "run" / "export" / "step-00000004", state, {"name": "egt"}, {})
    write_export(tmp_path / "run" / "export", state, {"name": "egt"}, {})


def test_bench_json_does_not_replace_a_users_file(tmp_path, capsys):
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    refused(capsys, ["bench", "shard", "--limit", "10", "--rounds", "1", "--json", str(tmp_path / "notes.json")], tmp_path,
            "--json would replace a file gtscale did not write")
