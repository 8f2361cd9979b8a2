"""The export format (gtscale.models.export): what write_export writes, read_export reads back
unchanged; a folder that is not an export, or a model.pt that would run code, is a one-line error."""

from __future__ import annotations

import pytest
import torch

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
