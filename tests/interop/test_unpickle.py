"""Foreign checkpoints are read without running their code: a crafted __reduce__ that would
create a marker file stays inert, in a fairseq checkpoint's options and as the whole file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.interop.unpickle import Opaque, load_foreign_checkpoint
from helpers import randomised
from test_import_graphormer import RELEASED, fairseq_checkpoint


class Payload:
    """Unpickling this runs exec(): it creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def test_the_payload_runs_under_plain_pickle(tmp_path):
    """The control: the crafted file is live, so the tests below could fail."""
    marker = tmp_path / "marker"
    torch.save({"x": Payload(marker)}, tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.exists()


def test_crafted_fairseq_checkpoint_imports_without_running_code(tmp_path):
    marker = tmp_path / "marker"
    ckpt = fairseq_checkpoint(randomised(RELEASED), RELEASED)
    ckpt["args"].payload = Payload(marker)
    ckpt["extra_state"] = {"train_iterator": Payload(marker), "numpy": __import__("numpy").float64(1.5)}
    torch.save(ckpt, tmp_path / "evil.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "evil.pt"), str(tmp_path / "out")]) == 0
    assert not marker.exists()
    loaded = load_foreign_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()
    assert isinstance(loaded["args"], Opaque) and loaded["args"].qualname == "argparse.Namespace"
    assert isinstance(loaded["args"].state["payload"], Opaque) and loaded["args"].state["multi_hop_max_dist"] == 3
    assert isinstance(loaded["model"]["encoder.embed_out.weight"], torch.Tensor)


@pytest.mark.parametrize("fmt", ["graphormer", "egt"])
def test_a_file_that_is_only_a_payload_is_refused(fmt, tmp_path, capsys):
    marker = tmp_path / "marker"
    torch.save(Payload(marker), tmp_path / "evil.pt")
    assert main(["import-checkpoint", "--format", fmt, str(tmp_path / "evil.pt"), str(tmp_path / "out")]) == 2
    assert not marker.exists()
    assert "evil.pt" in capsys.readouterr().err


def test_plain_state_dicts_take_the_weights_only_path(tmp_path):
    torch.save({"a": torch.ones(2)}, tmp_path / "plain.pt")
    assert torch.equal(load_foreign_checkpoint(tmp_path / "plain.pt")["a"], torch.ones(2))


def test_unreadable_files_are_one_line_errors(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="junk.pt"):
        load_foreign_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(UserError, match="no such checkpoint"):
        load_foreign_checkpoint(tmp_path / "absent.pt")


def test_namespace_options_survive_as_data(tmp_path):
    torch.save({"args": argparse.Namespace(dropout=0.25)}, tmp_path / "ns.pt")
    assert load_foreign_checkpoint(tmp_path / "ns.pt")["args"].state == {"dropout": 0.25}


def test_every_cut_of_a_legacy_file_is_a_one_line_error(tmp_path):
    """An empty file and a legacy (non-zip) checkpoint cut short anywhere: once EOFError, IndexError
    and struct.error tracebacks, by the point of the cut."""
    torch.save({"a": torch.ones(3), "b": [1, 2.5, "x"]}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    data = (tmp_path / "legacy.pt").read_bytes()
    for cut in range(len(data)):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(UserError, match="cut.pt: not a readable PyTorch checkpoint") as err:
            load_foreign_checkpoint(tmp_path / "cut.pt")
        assert "\n" not in str(err.value)


class RebuiltFrom:
    """A tensor whose rebuild arguments hold a payload at `position` (storage offset, size, …)."""

    def __init__(self, marker: Path, position: int):
        self.marker, self.position = marker, position

    def __reduce__(self):
        args = [torch.ones(2).storage(), 0, (1,), (1,), False, None]
        args[self.position] = Payload(self.marker)
        return torch._utils._rebuild_tensor_v2, tuple(args)


@pytest.mark.parametrize("position", [1, 2, 3, 4])
def test_a_payload_nested_in_a_tensor_rebuild_is_one_line_refused(position, tmp_path, capsys):
    """Once a TypeError of torch's many lines ("set_() received an invalid combination …")."""
    import warnings

    marker = tmp_path / "marker"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated; the payload needs one
        torch.save({"w": RebuiltFrom(marker, position)}, tmp_path / "nested.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "nested.pt"), str(tmp_path / "out")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "nested.pt: refused: loading it would run code (a tensor is rebuilt from" in lines[0], lines
    assert not marker.exists() and not (tmp_path / "out").exists()
