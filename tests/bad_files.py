"""Crafted and corrupted files for the bad-input tests: DeepSpeed checkpoint files made from real
ones, and shards whose manifest entry still matches (so only decoding can catch them)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import torch


class RunsCode:
    """Unpickling this runs `touch marker`: what an attacker would put in a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant_code(path: Path, marker: Path) -> Path:
    """Add an entry to a real checkpoint file whose unpickling would create `marker`."""
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own real file
    state["extra"] = RunsCode(marker)
    torch.save(state, path)
    return path


def truncate(path: Path) -> Path:
    """Cut a checkpoint file in half, as an interrupted copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def copy_run(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest


def model_states(folder: Path) -> Path:
    return sorted(folder.glob("*model_states.pt"))[0]


def optim_states(folder: Path) -> Path:
    return sorted(folder.glob("*optim_states.pt"))[-1]


#: A bad .npy member by kind: a garbled header, or an object array (loading it would unpickle).
BAD_NPY = {
    "npy_header": b"\x93NUMPY\x01\x00\x10\x00{'descr': <bad}   \n" + bytes(8),
    "object_array": None,  # filled in below (np.save of an object array)
}
_buf = io.BytesIO()
np.save(_buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
BAD_NPY["object_array"] = _buf.getvalue()


def replace_shard(root: Path, split: str, number: int, kind: str) -> Path:
    """Replace shard `number` of `split` with a one-sample shard whose node_feat.npy is BAD_NPY[kind], and
    update its manifest entry (bytes, sha256, samples) so that only decoding finds the fault."""
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["splits"][split]["shards"][number]
    path = root / entry["path"]
    os.chmod(path, 0o644)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("0000000001.meta.json", b'{"idx":1,"num_nodes":1,"num_edges":0}'), ("0000000001.node_feat.npy", BAD_NPY[kind])):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    import hashlib

    entry.update(bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), samples=1)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return path


class RebuiltFromCode:
    """A tensor whose rebuild arguments (its size) hold a RunsCode payload: the nested form that
    torch's weights-only reader refuses and the import reader's restricted unpickler must too."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, (torch.ones(2).storage(), 0, RunsCode(self.marker), (1,), False, None)


def plant_nested(path: Path, marker: Path) -> Path:
    """Add to a real checkpoint file a tensor whose rebuild would create `marker`."""
    import warnings

    state = torch.load(path, map_location="cpu", weights_only=False)  # our own real file
    state["extra"] = RebuiltFromCode(marker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(state, path)
    return path


def nested_rebuild(path: Path, marker: Path) -> Path:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated; the payload needs one
        torch.save({"w": RebuiltFromCode(marker)}, path)
    return path


def legacy_cut(path: Path, keep: int) -> Path:
    """A legacy (non-zip) torch checkpoint cut after `keep` bytes, as an interrupted copy leaves it."""
    torch.save({"w": torch.ones(3)}, path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes()[:keep])
    return path
