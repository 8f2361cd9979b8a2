"""An export's tensors carry their checksum (export.json `tensors_sha256`), checked whenever the
export is read: a finite byte flipped in model.pt, which no range check can find, is one line
naming the file. The shipped backbone carries one too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from export_fixtures import model_export
from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.models.export import read_export, read_weights, tensors_sha256
from gtscale.models.pretrained import export_path

MISMATCH = r"model.pt: its tensors do not match the checksum in export.json \(tensors_sha256\)"


def flip_a_byte(model_file: Path) -> None:
    """Flip the lowest bit of the first value of the largest floating tensor, in the file's bytes:
    the value stays finite and close, the zip archive stays readable."""
    state = read_weights(model_file)
    name = max((k for k in state if state[k].is_floating_point()), key=lambda k: state[k].numel())
    data = bytearray(model_file.read_bytes())
    at = data.find(state[name].contiguous().numpy().tobytes()[:64])
    assert at > 0
    data[at] ^= 1
    model_file.write_bytes(bytes(data))
    changed = read_weights(model_file)[name]
    assert torch.isfinite(changed).all() and not torch.equal(changed, state[name])


def test_an_export_records_its_tensors_checksum_and_a_flipped_byte_is_refused(tmp_path):
    export = model_export(tmp_path / "export")
    meta = json.loads((export / "export.json").read_text())
    assert meta["tensors_sha256"] == tensors_sha256(read_weights(export / "model.pt"))
    copied = shutil.copytree(export, tmp_path / "copy")  # a copy keeps its checksum
    read_export(copied)
    flip_a_byte(copied / "model.pt")
    with pytest.raises(UserError, match=MISMATCH):
        read_export(copied)


def test_the_shipped_backbone_is_checked_too(tmp_path, capsys):
    shipped = export_path("moses-egt")
    assert json.loads((shipped / "export.json").read_text())["tensors_sha256"] == tensors_sha256(read_weights(shipped / "model.pt"))
    damaged = shutil.copytree(shipped, tmp_path / "moses-egt")
    flip_a_byte(damaged / "model.pt")
    (tmp_path / "mols.csv").write_text("smiles\nCCO\n")
    assert main(["fingerprint", str(damaged), "--input", str(tmp_path / "mols.csv"), "--out", str(tmp_path / "z.npy"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moses-egt/model.pt: its tensors do not match the checksum in export.json" in err[0]


def test_an_export_written_before_checksums_is_read_as_it_is(tmp_path):
    export = model_export(tmp_path / "export")
    meta = json.loads((export / "export.json").read_text())
    del meta["tensors_sha256"]
    (export / "export.json").write_text(json.dumps(meta))
    assert read_export(export).meta.get("tensors_sha256") is None
