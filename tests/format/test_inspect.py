"""`gtscale inspect`: every shard verified before any record is shown; bad shards are FAIL lines."""

import json

import pytest

from bad_files import replace_shard
from gtscale.cli import main


@pytest.mark.parametrize("kind", ["npy_header", "object_array"])
def test_verify_reports_a_bad_first_shard_and_previews_a_good_one(nci_shards_copy, capsys, kind):
    bad = replace_shard(nci_shards_copy, "train", 0, kind)
    assert main(["inspect", str(nci_shards_copy), "--verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    fails = [line for line in out if line.startswith("FAIL ")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL {bad}: unreadable")
    assert any(line.startswith("record ") for line in out)  # a verified shard was previewed
    assert out.index(fails[0]) < next(i for i, line in enumerate(out) if line.startswith("record "))
    assert out[-1] == "verify: 1 problem(s)"


def test_preview_of_a_bad_shard_is_one_line(nci_shards_copy, capsys):
    bad = replace_shard(nci_shards_copy, "train", 0, "object_array")
    assert main(["inspect", str(nci_shards_copy)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(bad) in err[0] and "unpickl" in err[0]


def test_split_without_shards_is_one_line(nci_shards_copy, capsys):
    manifest = json.loads((nci_shards_copy / "manifest.json").read_text())
    manifest["splits"]["extra"] = {"samples": 0, "shards": [], "rejected": {}}
    (nci_shards_copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["inspect", str(nci_shards_copy), "--split", "extra"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--split 'extra': has no shards" in err[0]


def test_a_shard_linked_from_outside_the_folder_fails_verification(nci_shards_copy, tmp_path, capsys):
    """`inspect --verify` once said OK of a shard that was a link to a file elsewhere."""
    import shutil

    manifest = json.loads((nci_shards_copy / "manifest.json").read_text())
    first = nci_shards_copy / manifest["splits"]["train"]["shards"][0]["path"]
    shutil.move(first, tmp_path / "outside.tar")
    first.symlink_to(tmp_path / "outside.tar")
    assert main(["inspect", str(nci_shards_copy), "--verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    fails = [line for line in out if line.startswith("FAIL ")]
    assert len(fails) == 1 and "a symbolic link leads out of the shard folder" in fails[0] and out[-1] == "verify: 1 problem(s)"
    assert main(["inspect", str(nci_shards_copy)]) == 2  # the preview reads the first shard: refused too
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "a symbolic link leads out of the shard folder" in err[0]
