"""The export format (gtscale.models.export): what write_export writes, read_export reads back
unchanged; a folder that is not an export, a model.pt that would run code, or a tampered value in
model.yaml, export.json or model.pt is a one-line error naming the file and key."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from export_fixtures import kernel_export, model_export
from gtscale.errors import UserError
from gtscale.models import load_model_config
from gtscale.models.export import build_exported, load_exported, read_export, read_weights, write_export
from model_fixtures import make_batch


def small_config() -> dict:
    cfg = load_model_config("egt-small")
    return {**cfg, "num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "svd_rank": 4, "head": {"kind": "graph", "num_outputs": 3}}


def test_written_export_reads_back_equal(tmp_path, graphs):
    cfg = small_config()
    torch.manual_seed(0)
    model = build_exported(cfg).eval()
    out = write_export(tmp_path / "export", model.state_dict(), cfg, {"source": "test"})
    export = read_export(out)
    assert export.config == cfg and export.meta["source"] == "test"
    assert export.meta["parameters"] == sum(v.numel() for v in model.state_dict().values())
    assert export.state.keys() == model.state_dict().keys()
    assert all(torch.equal(export.state[k], v.float()) for k, v in model.state_dict().items())
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "model.pt", "model.yaml"]  # no temporary left
    # read through model.pt's path as init_from names it, and as a built model
    assert read_export(out / "model.pt").folder == out
    loaded, _ = load_exported(out)
    batch = make_batch(graphs)
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch))


def test_state_keys_follow_the_trainers_task_model():
    """The trainer's task model is an ExportedModel: its state dict minus the distance head is an export's."""
    from gtscale.models.export import ExportedModel
    from gtscale.train.task_model import GraphTaskModel

    assert issubclass(GraphTaskModel, ExportedModel)


def test_an_exported_model_reads_the_molecule_features_its_head_was_trained_with(graphs):
    """load_exported's model computes what the trainer's task model computed: with graph_feat when
    its head reads them (the molecule features of `shard --graph-features`)."""
    from gtscale.train.task_model import GraphTaskModel

    cfg = {**small_config(), "head": {"kind": "graph", "num_outputs": 3, "graph_features": 5}}
    torch.manual_seed(0)
    model = build_exported(cfg).eval()
    batch = make_batch(graphs)
    batch.graph_feat = torch.randn(batch.num_graphs, 5)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), GraphTaskModel(model.backbone, model.head).eval()(batch)[0])


def test_folder_without_the_export_files_is_refused(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"")
    with pytest.raises(UserError, match=r"not a gtscale export \(no model.yaml, export.json\)"):
        read_export(tmp_path)
    with pytest.raises(UserError, match="no such export folder"):
        read_export(tmp_path / "absent")


def test_model_file_that_would_run_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    torch.save({"w": Payload()}, tmp_path / "model.pt")  # a torch file whose pickle calls print
    with pytest.raises(UserError, match=r"refused: loading it would run code \(print\)"):
        read_weights(tmp_path / "model.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "model.pt").read_bytes()[:5])
    with pytest.raises(UserError, match="not a readable weights-only model file"):
        read_weights(tmp_path / "cut.pt")
    torch.save({"w": [1, 2]}, tmp_path / "list.pt")
    with pytest.raises(UserError, match="expected a mapping of tensor names to tensors"):
        read_weights(tmp_path / "list.pt")


def test_malformed_config_names_the_folder(tmp_path, graphs):
    cfg = small_config()
    out = write_export(tmp_path / "e", build_exported(cfg).state_dict(), cfg, {})
    (out / "model.yaml").write_text("name: [egt\n")
    with pytest.raises(UserError, match="malformed model.yaml") as err:
        read_export(out)
    assert "\n" not in str(err.value)


# --- what read_export checks: one line naming the file and key for a tampered value ----------------
NAN, INF = math.nan, math.inf


def _set(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    data[last] = value


def tampered(source: Path, file: str, dotted: str, value, out: Path) -> Path:
    """A copy of export `source` with `dotted` of `file` (model.yaml or export.json) set to `value`."""
    shutil.copytree(source, out)
    path = out / file
    data = yaml.safe_load(path.read_text()) if file.endswith(".yaml") else json.loads(path.read_text())
    _set(data, dotted, value)
    path.write_text(yaml.safe_dump(data) if file.endswith(".yaml") else json.dumps(data))
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    return model_export(tmp_path_factory.mktemp("export") / "tiny")


TAMPERED = [
    # each was once read as it stood: a traceback while building or featurising, or blank predictions
    ("model.yaml", "num_heads", -8, "num_heads: must be in 1..1024, got -8"),
    ("model.yaml", "num_layers", 100000, "num_layers: must be in 1..1024, got 100000"),
    ("model.yaml", "node_ffn_multiplier", NAN, "node_ffn_multiplier: must be in (0, 64], got nan"),
    ("model.yaml", "head.num_outputs", 0, "head.num_outputs: must be in 1..65536, got 0"),
    ("model.yaml", "head.dropout", 1.5, "head.dropout: must be in [0, 1), got 1.5"),
    ("export.json", "shards.transform.svd_rank", -1, "shards.transform.svd_rank: must be in 0..65536, got -1"),
    ("export.json", "shards.transform.max_nodes", "x", "shards.transform.max_nodes: expected an integer, got 'x'"),
    ("export.json", "shards.transform.paths", "dijkstra", "shards.transform.paths: 'dijkstra' is not one of 'bfs', 'floyd-warshall'"),
    ("export.json", "shards.transform", [1, 2], "shards.transform: expected a mapping, got list"),
    ("export.json", "shards", "shards/", "shards: expected a mapping, got str"),
    ("export.json", "shards.features.graph", {"generators": ["ecfp6"], "dim": 4096},
     "shards.features.graph.generators[0]: 'ecfp6' is not one of 'morgan2048', 'morgan2048counts', 'rdkit2d'"),
    ("export.json", "shards.features.graph", {"generators": ["rdkit2d"], "dim": 3},
     "shards.features.graph: rdkit2d statistics belong with the rdkit2d generator"),
    ("export.json", "shards.features.graph", {"generators": ["rdkit2d"], "dim": 2, "rdkit2d": {"names": ["a", "b"], "mean": [0.0, NAN], "std": [1.0, 1.0]}},
     "shards.features.graph.rdkit2d.mean: must be finite (each value), got [0.0, nan]"),
    ("export.json", "shards.features.graph", {"generators": ["morgan2048"], "dim": 2048},
     "shards.features.graph: 2048 graph features, but model.yaml's head.graph_features is 0"),
    ("export.json", "task.target_scale", NAN, "task.target_scale: must be > 0, got nan"),
    ("export.json", "task.target_scale", [0.0], "task.target_scale: must be > 0 (each value), got [0.0]"),
    ("export.json", "task.target_shift", [INF], "task.target_shift: must be finite (each value), got [inf]"),
    ("export.json", "task.target_shift", [1.0, 2.0], "task.target_shift: [1.0, 2.0] is not a number or one per output (1)"),
    ("export.json", "task.target_scale", "auto", "task.target_scale: 'auto' is not a number or one per output (1)"),
    ("export.json", "shards.task.target_names", ["tpsa", "logp"], "shards.task.target_names: 2 names for the 1 output(s) of model.yaml's head"),
    ("export.json", "shards.task.num_targets", 3, "shards.task.num_targets: 3 for the 1 output(s)"),
    ("export.json", "parameters", -1, "parameters: must be >= 0, got -1"),
    ("export.json", "mystery", 1, "mystery: unknown key"),
]


@pytest.mark.parametrize("file,dotted,value,fragment", TAMPERED, ids=[f"{t[1]}={t[2]!r}" for t in TAMPERED])
def test_a_tampered_value_is_refused_when_read(saved, tmp_path, file, dotted, value, fragment):
    folder = tampered(saved, file, dotted, value, tmp_path / "export")
    with pytest.raises(UserError) as err:
        read_export(folder)
    assert str(err.value).startswith(f"{folder / file}: ") and fragment in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_the_untampered_export_reads_back(saved):
    export = read_export(saved)
    assert export.meta["task"]["target_scale"] == [40.0] and export.meta["shards"]["task"]["target_names"] == ["tpsa"]


def test_a_tensor_holding_nan_is_refused(saved, tmp_path):
    shutil.copytree(saved, tmp_path / "export")
    state = torch.load(tmp_path / "export" / "model.pt", weights_only=True)
    state["head.mlp.layers.0.bias"][0] = float("nan")
    torch.save(state, tmp_path / "export" / "model.pt")
    with pytest.raises(UserError, match=r"model.pt: tensor head.mlp.layers.0.bias holds NaN or infinity"):
        read_export(tmp_path / "export")


def test_a_carried_backbone_is_checked_like_a_model(saved, tmp_path):
    """The kernel SVR export carries its backbone: its config in model.yaml, its record in export.json."""
    kernel = kernel_export(tmp_path / "kernel", saved)
    read_export(kernel)
    with pytest.raises(UserError, match=r"model.yaml: backbone.num_heads: must be in 1..1024, got -8"):
        read_export(tampered(kernel, "model.yaml", "backbone.num_heads", -8, tmp_path / "a"))
    with pytest.raises(UserError, match=r"export.json: backbone.task.target_scale: must be > 0, got 0.0"):
        read_export(tampered(kernel, "export.json", "backbone.task.target_scale", 0.0, tmp_path / "b"))
    with pytest.raises(UserError, match=r"export.json: backbone.shards.task.target_names: 2 names for the 1 output"):
        read_export(tampered(kernel, "export.json", "backbone.shards.task.target_names", ["a", "b"], tmp_path / "c"))


def test_a_config_that_does_not_fit_its_weights_is_refused_before_it_is_built(saved, tmp_path):
    """The shapes are compared on the meta device: a model.yaml claiming a model far larger than
    its weights costs no memory (here 16 layers of width 4096: 6 GB had it been built)."""
    from gtscale.models.export import check_fits

    export = read_export(saved)
    huge = {**export.config, "node_width": 4096, "num_layers": 16}
    with pytest.raises(UserError, match=r"where: does not fit the model"):
        check_fits(export.state, huge, "where")


def test_a_model_file_cut_short_says_so(saved, tmp_path):
    """Cut at 64 KiB, as an interrupted copy leaves it: once reported as "OSError: [Errno 22]"."""
    cut = tmp_path / "model.pt"
    cut.write_bytes((saved / "model.pt").read_bytes()[:65536])
    with pytest.raises(UserError, match=r"model.pt: not a readable weights-only model file \(cut short: a zip archive of 65,536 bytes"):
        read_weights(cut)


def test_an_export_that_read_export_would_refuse_is_not_written(tmp_path):
    """A run whose weights went NaN, or a writer's bad record, fails at `gtscale export`, not later
    in whoever reads the export."""
    cfg = small_config()
    state = build_exported(cfg).state_dict()
    state["head.mlp.layers.0.bias"][0] = float("nan")
    with pytest.raises(UserError, match=r"model.pt: tensor head.mlp.layers.0.bias holds NaN"):
        write_export(tmp_path / "e", state, cfg, {})
    with pytest.raises(UserError, match=r"export.json: task.target_scale: must be > 0, got -1.0"):
        write_export(tmp_path / "e", build_exported(cfg).state_dict(), cfg, {"task": {"loss": "l1", "target_scale": -1.0}})
    assert not (tmp_path / "e").exists()
