"""A manifest may list only shards inside its folder: a checksum proves a file's
bytes, not where it lies, so `../x.tar` or an absolute path is refused even when the checksum matches."""

from __future__ import annotations

import json
import shutil

import pytest

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.format.manifest import load_manifest


def relocate_first_shard(folder, new_path: str) -> None:
    """Move the first train shard to `new_path` (relative to the folder, or absolute) and list it there."""
    manifest = json.loads((folder / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][0]
    target = folder / new_path
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(folder / shard["path"], target)
    shard["path"] = new_path
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("where", ["../outside.tar", "/ABS/outside.tar", "train/../../outside.tar"])
def test_shard_outside_the_folder_is_refused(nci_shards_copy, capsys, where):
    where = where.replace("/ABS", str(nci_shards_copy.parent))
    relocate_first_shard(nci_shards_copy, where)
    with pytest.raises(UserError, match="shard paths must be relative and stay inside"):
        load_manifest(nci_shards_copy)
    assert main(["inspect", str(nci_shards_copy), "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and repr(where) in err, err


def test_shard_in_a_subfolder_of_its_own_folder_is_fine(nci_shards_copy, capsys):
    relocate_first_shard(nci_shards_copy, "train/moved/by-hand.tar")
    assert load_manifest(nci_shards_copy)["splits"]["train"]["shards"][0]["path"] == "train/moved/by-hand.tar"
    assert main(["inspect", str(nci_shards_copy), "--verify"]) == 0


@pytest.mark.parametrize("text,why", [("{oops", "malformed manifest (Expecting"), ("[1, 2]", "malformed manifest (a JSON list, not an object)"),
                                      (b"\xff\xfe", "malformed manifest ('utf-8' codec")])
def test_a_manifest_that_is_no_json_object_is_one_line_naming_it(tmp_path, text, why):
    """Both readers of a JSON manifest, a shard folder's and a graph store's, refuse one that holds no JSON object alike."""
    from gtscale.graphs.store import MANIFEST, load_manifest as load_store_manifest

    for folder, name, read in ((tmp_path / "shards", "manifest.json", load_manifest), (tmp_path / "store", MANIFEST, load_store_manifest)):
        folder.mkdir()
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(UserError) as err:
            read(folder)
        assert str(err.value).startswith(f"{folder / name}: {why}")
