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
