"""The standing bad-input table: every known bad input → its one-line message, its exit status, and
nothing else changed in the folder it was pointed at.

A new command or a new bad input joins by adding a `Case` to CASES: `prepare` builds the input in a
fresh folder from the shared fixtures and returns (argv, folder that must not change). Cases run
in-process through gtscale.cli.main (fast), except those whose command needs a launcher
(`gtscale train`: one real rank started as srun starts it). Training configs are refused before
any process group starts, so their rows run in-process too.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from bad_files import (copy_run, legacy_cut, model_states, nested_rebuild, optim_states, plant_code, plant_nested, replace_shard,
                       truncate)
from gtscale.cli import main
from gtscale.train.run_lock import LOCK_FILE

sys.path.insert(0, str(Path(__file__).parent / "train"))
from launcher import NO_WORKERS, logs, run_ranks, write_config  # noqa: E402

TAGS = ["step-00000002", "step-00000004"]


@dataclass
class Inputs:
    """The shared, read-only fixtures a case copies from."""

    shards: Path  # a sharded dataset (nci-tpsa, small: the shared tpsa_shards fixture)
    run: Path  # a finished 1-rank ZeRO-2 run with complete checkpoints TAGS
    export: Path  # `gtscale export` of the run's latest checkpoint (with the task and shards record predict reads)


@dataclass
class Case:
    id: str
    prepare: Callable[[Path, Inputs], tuple[list[str], Path]]  # (argv, folder that must not change)
    fragment: str  # must appear in the one stderr line (or in stdout for exit statuses other than 2)
    code: int = 2
    launcher: bool = False  # `gtscale train`: run as one real rank
    changes: tuple[str, ...] = ()  # path prefixes (in the watched folder) the command may add, change or remove
    cleanup: Callable[[Path], object] | None = None  # undoes what prepare set up outside files (a mount), given its folder


# --- preparing inputs -------------------------------------------------------------------------
def csv_input(text: str, *extra: str):
    def prepare(tmp: Path, inputs: Inputs):
        (tmp / "mols.csv").write_text(text)
        out = tmp / "out"
        argv = ["shard", "smiles-csv", "--input", str(tmp / "mols.csv"), "--id-column", "id", "--split-column", "split",
                "--target-columns", "y", "--out", str(out), "--no-progress", *extra]
        return argv, tmp
    return prepare


def out_is_a_file(tmp: Path, inputs: Inputs):
    (tmp / "taken").write_text("mine")
    return ["shard", "nci-tpsa", "--out", str(tmp / "taken"), "--no-progress"], tmp


def parts_unwritable(tmp: Path, inputs: Inputs):
    """gtscale's own shard folder (a rerun may write there) whose parts/ became unwritable."""
    argv, _ = csv_input("smiles,id,split,y\nCCO,a,train,1\n")(tmp, inputs)
    assert main(argv) == 0
    shutil.rmtree(tmp / "out" / "parts")
    (tmp / "out" / "parts").symlink_to("/sys/kernel", target_is_directory=True)  # root ignores chmod
    return [*argv, "--shard-size", "7"], tmp


def rerun_with_bigger_shards(tmp: Path, inputs: Inputs):
    argv = ["shard", "nci-tpsa", "--out", str(tmp / "out"), "--no-progress", "--lap-k", "0", "--svd-rank", "0", "--max-nodes", "12"]
    assert main([*argv, "--shard-size", "200"]) == 0
    return [*argv, "--shard-size", "600"], tmp


EVERYTHING = ("",)


# --- output folders gtscale did not write (gtscale.io.claim_out_dir) ---------------------------
def out_holding(*files: str, argv_of=lambda tmp, out: csv_input("smiles,id,split,y\nCCO,a,train,1\n")(tmp, None)[0]):
    """An --out folder already holding `files` (user's, not gtscale's); the command of `argv_of`."""
    def prepare(tmp: Path, inputs: Inputs):
        out = tmp / "out"
        for name in files:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text('{"mine": 1}')
        return argv_of(tmp, out), tmp
    return prepare


def small_store(tmp: Path) -> Path:
    assert main(["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--out", str(tmp / "store"), "--quiet"]) == 0
    return tmp / "store"


def ego_out_inside_store(tmp: Path, inputs: Inputs):
    store = small_store(tmp)
    return ["shard", "graph-ego", "--graph", str(store), "--out", str(store / "shards"), "--no-progress"], tmp


def graph_out_is_input(tmp: Path, inputs: Inputs):
    import numpy as np

    (tmp / "plain").mkdir()
    np.save(tmp / "plain" / "edges.npy", np.array([[0, 1], [1, 2]], np.int64))
    return ["graph", "build", "plain", "--input", str(tmp / "plain"), "--out", str(tmp / "plain"), "--quiet"], tmp


def export_to(out_of: Callable[[Path, Path], Path]):
    """`gtscale export` of a copy of the shared run into out_of(tmp, run), which holds a user's file."""
    def prepare(tmp: Path, inputs: Inputs):
        run = copy_run(inputs.run, tmp / "run")
        out = out_of(tmp, run)
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("mine")
        return ["export", str(run), "--tag", "latest", "--out", str(out)], tmp
    return prepare


def import_into_foreign(tmp: Path, inputs: Inputs):
    (tmp / "ckpt.pt").write_bytes(b"never read")
    (tmp / "out").mkdir()
    (tmp / "out" / "results.csv").write_text("mine")
    return ["import-checkpoint", "--format", "graphormer", str(tmp / "ckpt.pt"), str(tmp / "out")], tmp


def bench_json_over(tmp: Path, inputs: Inputs):
    (tmp / "figures.json").write_text('{"mine": 1}')
    return ["bench", "shard", "--limit", "10", "--rounds", "1", "--json", str(tmp / "figures.json")], tmp


def manifest_listing(where: str):
    """A copy of the shared shards whose manifest lists its first train shard at `where` (moved there)."""
    def prepare(tmp: Path, inputs: Inputs):
        import json

        shards = shards_copy(tmp, inputs)
        manifest = json.loads((shards / "manifest.json").read_text())
        shard = manifest["splits"]["train"]["shards"][0]
        path = where.replace("ABS", str(tmp))
        shutil.move(shards / shard["path"], shards / path)
        shard["path"] = path
        (shards / "manifest.json").write_text(json.dumps(manifest))
        return ["inspect", str(shards), "--verify"], tmp
    return prepare


def shard_onto_full_disk(tmp: Path, inputs: Inputs):
    import subprocess

    (tmp / "small").mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(tmp / "small")], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return ["shard", "nci-tpsa", "--out", str(tmp / "small" / "out"), "--shard-size", "400", "--lap-k", "0", "--svd-rank", "0", "--no-progress"], tmp


def unmount_small(tmp: Path) -> None:
    import subprocess

    subprocess.run(["umount", str(tmp / "small")], check=True)
def shards_copy(tmp: Path, inputs: Inputs) -> Path:
    return Path(shutil.copytree(inputs.shards, tmp / "shards"))


def inspect_bad_npy(kind: str):
    def prepare(tmp: Path, inputs: Inputs):
        shards = shards_copy(tmp, inputs)
        replace_shard(shards, "train", 0, kind)
        return ["inspect", str(shards), "--verify"], shards
    return prepare


def inspect_empty_split(tmp: Path, inputs: Inputs):
    import json

    shards = shards_copy(tmp, inputs)
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["splits"]["extra"] = {"rows": 0, "samples": 0, "shards": [], "rejected": {}}
    (shards / "manifest.json").write_text(json.dumps(manifest))
    return ["inspect", str(shards), "--split", "extra"], shards


def run_with(change: Callable[[Path], object], *argv: str, resume: str | None = None, **sections):
    """A copy of the shared run with `change(checkpoints folder)` applied; export, or resume if given
    (with `sections` replaced in the resumed job's config)."""
    def prepare(tmp: Path, inputs: Inputs):
        run = copy_run(inputs.run, tmp / "run")
        change(run / "checkpoints")
        if resume is None:
            return ["export", str(run), *argv], run
        base = {"data": NO_WORKERS, "schedule": {"total_steps": 4, "warmup_steps": 1}, "checkpoint": {"every": 2, "keep": 2}}
        cfg = write_config(tmp / "resume.yaml", inputs.shards, run, **(base | sections))
        return [str(cfg), "--resume", resume], run
    return prepare


def train_config(**sections):
    """`gtscale train` on a config with `sections` replaced; refused before any process starts."""
    def prepare(tmp: Path, inputs: Inputs):
        cfg = write_config(tmp / "bad.yaml", inputs.shards, tmp / "run", **sections)
        return ["train", str(cfg)], tmp
    return prepare


def run_dir_at(make: Callable[[Path], Path], **sections):
    """`gtscale train` (one real rank) into the run_dir `make(folder)` returns; the folder is watched."""
    def prepare(tmp: Path, inputs: Inputs):
        (tmp / "w").mkdir()
        run = make(tmp / "w")
        cfg = write_config(tmp / "c.yaml", inputs.shards, run, **sections)
        return [str(cfg)], tmp / "w"
    return prepare


MOUNTS: list[Path] = []  # tmpfs mounted by a case, unmounted after it (the `unmount` fixture)
HOLDERS: list = []  # processes holding a run_dir's lock for a case, ended after it


def tmpfs(tmp: Path, size: str, read_only: bool = False) -> Path:
    """A fresh tmpfs of `size` at tmp/mnt (we run as root: a read-only mount is the way to an
    unwritable folder, chmod does not stop root)."""
    folder = tmp / "mnt"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if read_only else ""), "tmpfs", str(folder)], check=True)
    MOUNTS.append(folder)
    return folder


def a_file(path: Path) -> Path:
    path.write_text("mine")
    return path


def run_dir_in_use(tmp: Path) -> Path:
    """tmp/run, locked by another process as a running `gtscale train` locks it."""
    hold = "import sys, time; from gtscale.train import run_lock; run_lock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(tmp / "run")], stdout=subprocess.PIPE, text=True)
    HOLDERS.append(holder)
    assert holder.stdout.readline().strip() == "held"
    return tmp / "run"


def run_file(name: str, text: str, *argv: str):
    """A copy of the shared run with `name` (relative to it) holding `text`; `gtscale *argv RUN`."""
    def prepare(tmp: Path, inputs: Inputs):
        run = copy_run(inputs.run, tmp / "run")
        (run / name).write_text(text)
        return [*argv, str(run)], tmp
    return prepare


def export_out_is_a_file(tmp: Path, inputs: Inputs):
    run = copy_run(inputs.run, tmp / "run")
    (tmp / "taken").write_text("mine")
    return ["export", str(run), "--out", str(tmp / "taken")], tmp


def dgl_shape(shape: tuple[int, int]):
    """`graph build dgl` of a DGL fixture whose (40, 20) feature tensor claims `shape` instead: the
    product of the dimensions still matches its byte count (two negatives; or int64 wrap-around)."""
    def prepare(tmp: Path, inputs: Inputs):
        import struct

        data = bytearray((Path(__file__).parent / "graphs" / "fixtures" / "coo_tsocial_like.bin").read_bytes())
        at = 6710 + 32  # the tensor's magic, then reserved, device, ndim, dtype: its shape
        assert struct.unpack_from("<2q", data, at) == (40, 20)
        struct.pack_into("<2q", data, at, *shape)
        (tmp / "graph.bin").write_bytes(bytes(data))
        return ["graph", "build", "dgl", "--input", str(tmp / "graph.bin"), "--out", str(tmp / "store"), "--quiet"], tmp
    return prepare


def crafted(which, tag=TAGS[-1]):
    return lambda ckpts: plant_code(which(ckpts / tag), ckpts.parent.parent / "marker")


def best_json(text: str):
    return lambda ckpts: (ckpts.parent / "best.json").write_text(text)


def corrupt_graph_store(tmp: Path, inputs: Inputs):
    """`gtscale train` on a graph store whose indices.npy holds an id past the last node (same size,
    so only the open-time CSR check finds it; the samplers' kernels once segfaulted on it)."""
    import numpy as np

    store = tmp / "store"
    assert main(["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--out", str(store), "--quiet"]) == 0
    indices = np.load(store / "indices.npy")
    indices[7] = 10**6
    np.save(store / "indices.npy", indices)
    return train_config(data={"shards": None, "graph": {"store": str(store)}})(tmp, inputs)


def foreign_checkpoint(make: Callable[[Path, Path], object], fmt: str = "graphormer"):
    """`gtscale import-checkpoint` of the file make(path, marker) writes."""
    def prepare(tmp: Path, inputs: Inputs):
        (tmp / "in").mkdir()
        make(tmp / "in" / "ckpt.pt", tmp / "marker")
        return ["import-checkpoint", "--format", fmt, str(tmp / "in" / "ckpt.pt"), str(tmp / "out")], tmp
    return prepare


def fairseq_cfg_layout(path: Path, marker: Path):
    """The hydra-based fairseq's layout ("args": None, options under cfg["model"]) with an option
    gtscale cannot honour: it was accepted there and refused only in the old layout."""
    import torch

    torch.save({"args": None, "cfg": {"model": {"activation_fn": "relu", "multi_hop_max_dist": 20}},
                "model": {"encoder.graph_encoder.layers.0.fc1.weight": torch.zeros(4, 4)}}, path)


def random_bytes(path: Path) -> Path:
    import numpy as np

    path.write_bytes(np.random.default_rng(0).bytes(4096))  # no GLOBAL opcode in it: not a refusal
    return path


# --- gtscale predict ------------------------------------------------------------------------------
def predict_on(write: Callable[[Path, Inputs], Path], *extra: str, members: int = 1):
    """`gtscale predict` of the shared export (`members` times: an ensemble) on the input that
    write(tmp, inputs) makes, into tmp/out.csv."""
    def prepare(tmp: Path, inputs: Inputs):
        source = write(tmp, inputs)
        return ["predict", *[str(inputs.export)] * members, "--input", str(source), "--out", str(tmp / "out.csv"), "--no-progress", *extra], tmp
    return prepare


def fingerprint_on(write: Callable[[Path, Inputs], Path], out: str = "out.npy", *extra: str):
    """`gtscale fingerprint` of the shared export on the input that write(tmp, inputs) makes, into tmp/out."""
    def prepare(tmp: Path, inputs: Inputs):
        return ["fingerprint", str(inputs.export), "--input", str(write(tmp, inputs)), "--out", str(tmp / out), "--no-progress", *extra], tmp
    return prepare


def users_npy_at_out(tmp: Path, inputs: Inputs) -> Path:
    import numpy as np

    np.save(tmp / "out.npy", np.arange(3.0))
    return text_file("mols.csv", "smiles\nCCO\n")(tmp, inputs)


def text_file(name: str, text: str) -> Callable[[Path, Inputs], Path]:
    def write(tmp: Path, inputs: Inputs) -> Path:
        (tmp / name).write_text(text)
        return tmp / name
    return write


def packed_file(name: str, members: int = 1, cut: int = 0) -> Callable[[Path, Inputs], Path]:
    """tmp/name: a CSV of two molecules compressed as its suffix says (a .zip of `members` files),
    its last `cut` bytes missing."""
    def write(tmp: Path, inputs: Inputs) -> Path:
        import io
        import lzma
        import zipfile

        data = b"smiles\nCCO\nCCN\n"
        if name.endswith(".zip"):
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                for i in range(members):
                    archive.writestr(f"part{i}.csv", data)
            data = buffer.getvalue()
        elif name.endswith(".xz"):
            data = lzma.compress(data)
        else:  # .zst: read only where the zstandard module is installed
            import importlib.util

            if importlib.util.find_spec("zstandard") is not None:
                pytest.skip("zstandard is installed: a .zst input is read")
            data = b"\x28\xb5\x2f\xfd" + data
        (tmp / name).write_bytes(data[: len(data) - cut])
        return tmp / name
    return write


def users_file_at_out(tmp: Path, inputs: Inputs) -> Path:
    (tmp / "out.csv").write_text("my,own,results\n1,2,3\n")
    return text_file("mols.csv", "smiles\nCCO\n")(tmp, inputs)


def input_named_out(tmp: Path, inputs: Inputs) -> Path:
    """The input is tmp/out.csv itself (--out names it)."""
    return text_file("out.csv", "smiles\nCCO\n")(tmp, inputs)


def shards_with_an_empty_split(tmp: Path, inputs: Inputs) -> Path:
    """A copy of the shared shards holding only their valid split and an empty one."""
    import json

    shards = shards_copy(tmp, inputs)
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["splits"] = {"valid": manifest["splits"]["valid"], "extra": {"rows": 0, "samples": 0, "shards": [], "rejected": {}}}
    (shards / "manifest.json").write_text(json.dumps(manifest))
    return shards


def shard_zip_of_two(tmp: Path, inputs: Inputs):
    source = packed_file("mols.csv.zip", members=2)(tmp, inputs)
    return ["shard", "smiles-csv", "--input", str(source), "--out", str(tmp / "out"), "--no-progress"], tmp


HUGE_SMILES = "C" * 10_000_000  # 10 MB: RDKit took 37 s and 5 GB over it before any structure work


# --- exports that predict reads (models/export.py checks them as they are read) --------------------
def _edit(path: Path, dotted: str, value) -> None:
    """Set `dotted` (keys joined by dots) in a model.yaml or export.json to `value`."""
    import json

    import yaml

    data = yaml.safe_load(path.read_text()) if path.suffix == ".yaml" else json.loads(path.read_text())
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    path.write_text(yaml.safe_dump(data) if path.suffix == ".yaml" else json.dumps(data))


def _predict_argv(tmp: Path, export: Path) -> list[str]:
    from export_fixtures import molecules_csv

    return ["predict", str(export), "--input", str(molecules_csv(tmp / "mols.csv")), "--out", str(tmp / "preds.csv"), "--no-progress"]


def predict_tampered(file: str, dotted: str, value, kind: str = "model"):
    """`gtscale predict` of a copy of an export (the run's, an ECFP + SVR, or a kernel SVR over the
    run's) whose `dotted` key of `file` holds `value`."""
    def prepare(tmp: Path, inputs: Inputs):
        from export_fixtures import kernel_export, svr_export

        export = {"model": lambda: Path(shutil.copytree(inputs.export, tmp / "export")), "svr": lambda: svr_export(tmp / "export"),
                  "kernel": lambda: kernel_export(tmp / "export", inputs.export)}[kind]()
        _edit(export / file, dotted, value)
        return _predict_argv(tmp, export), tmp
    return prepare


def predict_tensor(name: str, change: Callable, kind: str = "svr"):
    """`gtscale predict` of an SVR export whose tensor `name` is change(tensor)."""
    def prepare(tmp: Path, inputs: Inputs):
        import torch

        from export_fixtures import kernel_export, save_tensors, svr_export

        export = svr_export(tmp / "export") if kind == "svr" else kernel_export(tmp / "export", inputs.export)
        state = torch.load(export / "model.pt", weights_only=True)
        state[name] = change(state[name].clone())
        save_tensors(export, state)
        return _predict_argv(tmp, export), tmp
    return prepare


def _nan_first(tensor):
    tensor.view(-1)[0] = float("nan")
    return tensor


def graphormer_checkpoint(tmp: Path, inputs: Inputs, **options) -> list[str]:
    """`gtscale import-checkpoint` of a small fairseq Graphormer checkpoint with `options` saved."""
    sys.path.insert(0, str(Path(__file__).parent / "interop"))
    import torch
    from helpers import randomised
    from test_import_graphormer import RELEASED, fairseq_checkpoint

    torch.save(fairseq_checkpoint(randomised(RELEASED), RELEASED, "cfg", **options), tmp / "ckpt.pt")
    return ["import-checkpoint", "--format", "graphormer", str(tmp / "ckpt.pt"), str(tmp / "out")]


def cut_checkpoint(tmp: Path, inputs: Inputs):
    argv = graphormer_checkpoint(tmp, inputs)
    (tmp / "ckpt.pt").write_bytes((tmp / "ckpt.pt").read_bytes()[:65536])
    return argv, tmp


def shard_linked_from_outside(*flags: str):
    """`gtscale inspect` of a copy of the shared shards whose first shard is a link to a file outside
    the folder (the same bytes: its checksum matches)."""
    def prepare(tmp: Path, inputs: Inputs):
        import json

        shards = shards_copy(tmp, inputs)
        splits = json.loads((shards / "manifest.json").read_text())["splits"]
        first = shards / next(info["shards"][0]["path"] for info in splits.values() if info["shards"])  # the one inspect previews
        shutil.move(first, tmp / "outside.tar")
        first.symlink_to(tmp / "outside.tar")
        return ["inspect", str(shards), *flags], tmp
    return prepare


def graph_info_corrupt(tmp: Path, inputs: Inputs):
    import numpy as np

    store = small_store(tmp)
    indices = np.load(store / "indices.npy")
    indices[3] = -7
    np.save(store / "indices.npy", indices)
    return ["graph", "info", str(store)], tmp


def compile_cache_open_inside(tmp: Path, inputs: Inputs):
    cache = tmp / "cache"
    (cache / "fxgraph").mkdir(parents=True)
    cache.chmod(0o700)
    (cache / "fxgraph").chmod(0o777)
    return ["bench", "model", "--model", "egt-small", "--compile", "--compile-cache", str(cache), "--steps", "1"], tmp


def fit_csv(path: Path, change: Callable | None = None) -> Path:
    """150 NCI molecules with their TPSA as `y`, as `change` (a function of the frame) leaves them."""
    import pandas as pd

    from gtscale.prep.sources.bundled import read_nci_tpsa

    table = read_nci_tpsa()
    frame = pd.DataFrame({"smiles": table.smiles[:150], "y": table.targets[:150, 0]})
    (frame if change is None else change(frame)).to_csv(path, index=False)
    return path


def fit_on(change: Callable | None = None, *extra: str, out: Callable[[Path], Path] = lambda tmp: tmp / "out", inputs_of=None):
    """`gtscale fit` (recipe ecfp) of fit_csv into out(tmp); `inputs_of(tmp, csv)`, if given, names the CSVs."""
    def prepare(tmp: Path, inputs: Inputs):
        source = fit_csv(tmp / "mols.csv", change)
        files = [str(p) for p in inputs_of(tmp, source)] if inputs_of else [str(source)]
        return ["fit", *files, "--target-columns", "y", "--recipe", "ecfp", "--out", str(out(tmp)), "--no-progress", *extra], tmp
    return prepare


def three_files(test_of: Callable):
    """The fit CSV as train (rows 0..99), valid (100..124) and test_of(frame) files."""
    def inputs_of(tmp: Path, source: Path) -> list[Path]:
        import pandas as pd

        frame = pd.read_csv(source)
        parts = {"train": frame.iloc[:100], "valid": frame.iloc[100:125], "test": test_of(frame)}
        for name, part in parts.items():
            part.to_csv(tmp / f"{name}.csv", index=False)
        return [tmp / f"{name}.csv" for name in parts]
    return inputs_of


def acyclic(frame):
    """60 acyclic molecules: one Bemis–Murcko scaffold (none) for them all."""
    import pandas as pd

    return pd.DataFrame({"smiles": [f"{'C' * k}O" for k in range(1, 31)] + [f"{'C' * k}N" for k in range(1, 31)], "y": range(60)})


def predict_a_fit_folder(command: str):
    """`gtscale <command>` named a fit folder (fit run here, recipe ecfp) where its export/ is meant."""
    def prepare(tmp: Path, inputs: Inputs):
        argv, _ = fit_on()(tmp, inputs)
        assert main(argv) == 0
        return [command, str(tmp / "out"), "--input", str(tmp / "mols.csv"), "--out", str(tmp / "p.csv"), "--no-progress"], tmp
    return prepare


def stub_with_users_file(tmp: Path) -> Path:
    """A folder a failed fit left (its unfinished report.json) with a user's file where fit writes one."""
    (tmp / "out" / "members" / "ecfp").mkdir(parents=True)
    (tmp / "out" / "report.json").write_text('{"format": "gtscale-fit", "finished": false}')
    (tmp / "out" / "members" / "ecfp" / "model.yaml").write_text("my own model\n")
    return tmp / "out"


def users_files_where_a_member_goes(tmp: Path) -> Path:
    """A fit folder (recipe ecfp, fitted here) with a user's folder named for the kernel member."""
    argv, _ = fit_on()(tmp, None)
    assert main(argv) == 0
    (tmp / "out" / "members" / "kernel").mkdir()
    (tmp / "out" / "members" / "kernel" / "notes.txt").write_text("mine")
    return tmp / "out"


def predict_into_read_only(tmp: Path, inputs: Inputs):
    (tmp / "mols.csv").write_text("smiles\nCCO\n")
    out = tmpfs(tmp, "1m", read_only=True) / "out.csv"
    return ["predict", str(inputs.export), "--input", str(tmp / "mols.csv"), "--out", str(out), "--no-progress"], tmp


CASES = [
    # sharder input
    Case("shard-out-is-a-file", out_is_a_file, "needs a folder here, but this is a file"),
    Case("shard-parts-unwritable", parts_unwritable, "cannot write in this folder"),
    Case("shard-blank-split-label", csv_input("smiles,id,split,y\nCCO,a,train,1\nCCN,b,,2\n"), "data row 2 has a blank split label"),
    Case("shard-duplicate-molecules", csv_input("smiles,id,split,y\nCCO,a,train,1\nOCC,b,test,2\n"), "1 records repeat an earlier molecule",
         code=0, changes=("out/",)),
    Case("shard-empty-smiles-cell", csv_input("smiles,id,split,y\nCCO,a,train,1\n,b,train,2\n"), "(1 rejected", code=0, changes=EVERYTHING),
    Case("shard-infinite-target", csv_input("smiles,id,split,y\nCCO,a,train,1\nCCN,b,train,inf\n"), "(1 rejected", code=0, changes=EVERYTHING),
    Case("shard-target-column-without-a-finite-value", csv_input("smiles,id,split,y\nCCO,a,train,\nCCN,b,test,\n"),
         "mols.csv: target column 'y' has no finite value"),
    Case("shard-rerun-with-another-plan", rerun_with_bigger_shards, "of an earlier plan that the new manifest does not list", code=0, changes=EVERYTHING),
    Case("shard-disk-full", shard_onto_full_disk, "no space left on the device", changes=("small/out/plan.json", "small/out/parts"),
         cleanup=unmount_small),
    Case("shard-huge-smiles", csv_input(f"smiles,id,split,y\nCCO,a,train,1\n{HUGE_SMILES},b,train,2\n{'C' * 600},c,train,3\n"),
         "(2 rejected", code=0, changes=EVERYTHING),
    Case("shard-zip-of-two-files", shard_zip_of_two, "mols.csv.zip: a .zip of 2 files"),
    # gtscale predict
    Case("predict-out-is-a-users-file", predict_on(users_file_at_out), "--out would replace a file gtscale did not write"),
    Case("predict-out-is-the-input", predict_on(input_named_out, "--overwrite"), "--out is the input"),
    Case("predict-blank-line-in-one-column", predict_on(text_file("mols.csv", "smiles\nCCO\n\nCCN\n")),
         "wrote 3 rows to", code=0, changes=("out.csv",)),
    Case("predict-huge-smiles", predict_on(text_file("mols.csv", f"smiles\nCCO\n{HUGE_SMILES}\n{'C' * 600}\n")),
         "(2 without a prediction", code=0, changes=("out.csv",)),
    Case("predict-weights-infinite", predict_on(text_file("mols.csv", "smiles\nCCO\n"), "--weights", "inf", "1", members=2), "--weights: give one weight per export (2)"),
    Case("predict-weights-all-zero", predict_on(text_file("mols.csv", "smiles\nCCO\n"), "--weights", "0", "0", members=2), "finite, >= 0 and not all 0"),
    Case("predict-weights-negative", predict_on(text_file("mols.csv", "smiles\nCCO\n"), "--weights", "-1", "2", members=2), "finite, >= 0 and not all 0"),
    Case("predict-shards-with-an-empty-split", predict_on(shards_with_an_empty_split), "wrote", code=0, changes=("out.csv",)),
    Case("predict-shards-empty-split-named", predict_on(shards_with_an_empty_split, "--splits", "extra"), "--splits: split 'extra' of"),
    Case("predict-zip-of-two-files", predict_on(packed_file("mols.csv.zip", members=2)), "mols.csv.zip: a .zip of 2 files"),
    Case("predict-xz-cut-short", predict_on(packed_file("mols.csv.xz", cut=9)), "mols.csv.xz: not a readable CSV"),
    Case("predict-zst-without-zstandard", predict_on(packed_file("mols.csv.zst")), "mols.csv.zst: reading .zst needs the zstandard module"),
    # gtscale fingerprint
    Case("fingerprint-out-is-a-users-npy", fingerprint_on(users_npy_at_out), "--out would replace a file gtscale did not write"),
    Case("fingerprint-out-is-the-input", fingerprint_on(input_named_out, "out.csv", "--overwrite"), "--out is the input"),
    Case("fingerprint-huge-smiles", fingerprint_on(text_file("mols.csv", f"smiles\nCCO\n{HUGE_SMILES}\n{'C' * 600}\n")),
         "(2 without a representation", code=0, changes=("out.npy",)),
    Case("predict-out-read-only", predict_into_read_only, "mnt is on a read-only file system; choose a writable place"),
    # gtscale fit
    Case("fit-users-file-where-fit-writes", fit_on(out=stub_with_users_file), "members/ecfp/model.yaml: gtscale fit would write this file"),
    Case("fit-users-folder-where-a-member-goes", fit_on(None, "--recipe", "kernel", out=users_files_where_a_member_goes),
         "members/kernel: fit writes an export here, but it holds files gtscale did not write (notes.txt)"),
    Case("fit-out-in-use", fit_on(out=run_dir_in_use), "another gtscale fit is using it (pid"),
    Case("fit-out-read-only", fit_on(out=lambda tmp: tmpfs(tmp, "1m", read_only=True) / "out"), "read-only file system; choose a writable --out"),
    Case("fit-test-file-is-the-train-file", fit_on(inputs_of=three_files(lambda f: f.iloc[:100])), "every one of the 100 test molecules is also in the train split"),
    Case("fit-test-molecules-in-train", fit_on(inputs_of=three_files(lambda f: f.iloc[[*range(125, 137), *range(48)]])),
         "48 of 60 test molecules are also in train", code=0, changes=("out/",)),
    Case("fit-infinite-target", fit_on(lambda frame: frame.assign(y=frame.y.where(frame.index != 3, float("inf")))),
         "mols.csv: data row 4: target column 'y' holds inf"),
    Case("fit-unreadable-rows", fit_on(lambda frame: frame.assign(smiles=frame.smiles.where(frame.index != 3, "not a molecule"))),
         "1 SMILES RDKit cannot read", code=0, changes=("out/",)),
    Case("fit-split-column-without-a-name", fit_on(None, "--split", "column:"), "--split column:: name the column after column:"),
    Case("fit-seeds-without-a-network", fit_on(None, "--seeds", "1", "2"), "--seeds: recipe ecfp does not use it"),
    Case("fit-one-scaffold", fit_on(acyclic, "--split", "scaffold"), "the 60 molecules have 1 scaffold(s), the largest (none (acyclic)) shared by 60"),
    Case("predict-a-fit-folder", predict_a_fit_folder("predict"), "a `gtscale fit` folder, not an export; its model is"),
    Case("fingerprint-a-fit-folder", predict_a_fit_folder("fingerprint"), "a `gtscale fit` folder, not an export; its model is"),
    Case("fit-targets-of-one-value", fit_on(lambda frame: frame.assign(y=5.51)), "every train and valid row holds 5.51 in target column 'y'"),
    # output folders gtscale did not write, or inside the input
    Case("shard-out-holds-foreign-manifest", out_holding("manifest.json"), "holds files gtscale did not write (manifest.json;"),
    Case("shard-out-holds-file-named-like-a-shard", out_holding("train/train-000099.tar"), "holds files gtscale did not write (train;"),
    Case("shard-graph-ego-out-inside-store", ego_out_inside_store, "--out is inside the input"),
    Case("graph-build-out-is-input", graph_out_is_input, "--out is the input"),
    Case("graph-build-into-results-folder",
         out_holding("embeddings_final.npy", "metrics.json",
                     argv_of=lambda tmp, out: ["graph", "build", "synthetic", "--nodes", "60", "--edges", "200", "--out", str(out), "--quiet"]),
         "holds files gtscale did not write (embeddings_final.npy, metrics.json; no gtscale graph.json)"),
    Case("export-out-holds-foreign-files", export_to(lambda tmp, run: tmp / "results"), "holds files gtscale did not write (notes.txt;"),
    Case("export-out-is-the-run-dir", export_to(lambda tmp, run: run), "holds files gtscale did not write"),
    Case("import-checkpoint-out-holds-foreign-files", import_into_foreign, "OUT holds files gtscale did not write (results.csv;"),
    Case("bench-json-over-a-users-file", bench_json_over, "--json would replace a file gtscale did not write"),
    # shard folders
    Case("inspect-verify-bad-npy-header", inspect_bad_npy("npy_header"), "FAIL", code=1),
    Case("inspect-verify-object-array", inspect_bad_npy("object_array"), "FAIL", code=1),
    Case("inspect-split-without-shards", inspect_empty_split, "--split 'extra': has no shards"),
    Case("manifest-shard-outside-its-folder", manifest_listing("../outside.tar"), "shard paths must be relative and stay inside"),
    Case("manifest-shard-absolute-path", manifest_listing("ABS/outside.tar"), "shard paths must be relative and stay inside"),
    # checkpoints: export
    Case("export-crafted-model-states", run_with(crafted(model_states), "--tag", "latest"), "refused: loading it would run code"),
    Case("export-crafted-optim-states", run_with(crafted(optim_states), "--tag", "latest"), "refused: loading it would run code"),
    Case("export-malformed-best-json", run_with(best_json("{oops")), "best.json: malformed"),
    Case("export-best-json-missing-tag", run_with(best_json('{"tag": "step-00000099"}')), "names checkpoint 'step-00000099'"),
    Case("export-payload-nested-in-a-tensor", run_with(lambda c: plant_nested(model_states(c / TAGS[-1]), c.parent.parent / "marker"), "--tag", "latest"),
         "refused: loading it would run code (posix.system"),
    Case("export-random-bytes-model-states", run_with(lambda c: random_bytes(model_states(c / TAGS[-1])), "--tag", "latest"),
         "not a readable checkpoint"),
    Case("export-truncated-optim-states", run_with(lambda c: truncate(optim_states(c / TAGS[-1])), "--tag", "latest"), "corrupt or truncated checkpoint file"),
    # training configs (refused before any process group starts)
    Case("train-negative-lr", train_config(optimizer={"lr": -1.0}), "optimizer.lr"),
    Case("train-warmup-beyond-total", train_config(schedule={"total_steps": 10, "warmup_steps": 20}), "schedule.warmup_steps"),
    Case("train-checkpoint-every-zero", train_config(checkpoint={"every": 0}), "checkpoint.every"),
    Case("train-logging-every-zero", train_config(logging={"every": 0}), "logging.every"),
    Case("train-loader-keys-set", train_config(data={"loader": {"keys": ["spd"]}}), "data.loader.keys"),
    Case("train-unknown-head-key", train_config(task={"head": {"widths": [8]}}), "task.head"),
    Case("train-shards-and-graph", train_config(data={"graph": {"store": "graphs/x"}}), "set exactly one of data.shards"),
    Case("train-graph-fraction", train_config(data={"shards": None, "graph": {"store": "graphs/x", "fraction": 1.5}}), "data.graph.fraction"),
    Case("train-graph-not-a-store", train_config(data={"shards": None, "graph": {"store": "/nonexistent/store"}}), "not a finished graph store"),
    Case("train-graph-corrupt-store", corrupt_graph_store, "indices.npy: row"),
    # foreign checkpoints: import-checkpoint
    Case("import-empty-file", foreign_checkpoint(lambda p, m: p.write_bytes(b"")), "ckpt.pt: not a readable PyTorch checkpoint (EOFError"),
    Case("import-legacy-cut-short", foreign_checkpoint(lambda p, m: legacy_cut(p, 200)), "ckpt.pt: not a readable PyTorch checkpoint"),
    Case("import-legacy-cut-in-a-length", foreign_checkpoint(lambda p, m: legacy_cut(p, 19)), "ckpt.pt: not a readable PyTorch checkpoint"),
    Case("import-payload-nested-in-a-tensor", foreign_checkpoint(nested_rebuild),
         "refused: loading it would run code (a tensor is rebuilt from posix.system)"),
    Case("import-fairseq-cfg-layout-relu", foreign_checkpoint(fairseq_cfg_layout), "activation_fn 'relu'"),
    Case("train-extra-train-batch-size", train_config(deepspeed={"extra": {"train_batch_size": -3}}), "deepspeed.extra.train_batch_size: set by gtscale itself"),
    Case("train-extra-zero-stage", train_config(deepspeed={"extra": {"zero_optimization": {"stage": 3}}}), "deepspeed.extra.zero_optimization.stage: set by gtscale itself"),
    # finished runs
    Case("evaluate-config-resolved-not-yaml", run_file("config.resolved.yaml", "run_dir: [oops\n", "evaluate"), "config.resolved.yaml: not valid YAML"),
    Case("export-config-resolved-not-yaml", run_file("config.resolved.yaml", "run_dir: [oops\n", "export"), "config.resolved.yaml: not valid YAML"),
    Case("evaluate-resolved-config-out-of-range", run_file("config.resolved.yaml", "data: {shards: s}\nmodel: egt-small\nseed: -1\n", "evaluate"),
         "config.resolved.yaml: seed: must be in 0..2147483647"),
    Case("export-out-is-a-file", export_out_is_a_file, "is a file, not a folder"),
    # graph files
    Case("graph-dgl-negative-shape", dgl_shape((-40, -20)), "negative dimension in its shape (-40, -20)"),
    Case("graph-dgl-overflowing-shape", dgl_shape((40 + 2**62, 20)), "data bytes for shape"),
    # checkpoints: --resume (a real rank)
    Case("resume-crafted-model-states", run_with(crafted(model_states), resume=TAGS[-1]), "refused: loading it would run code", launcher=True),
    Case("resume-crafted-optim-states", run_with(crafted(optim_states), resume=TAGS[-1]), "refused: loading it would run code", launcher=True),
    Case("resume-auto-model-changed", run_with(lambda c: None, resume="auto", model_overrides={"node_width": 16}),
         "parameter shapes differ from the checkpoint's", launcher=True),
    # run directories (a real rank: the run_dir is locked and checked once the process group exists)
    Case("train-run-dir-is-a-file", run_dir_at(lambda t: a_file(t / "taken")), "is a file, not a folder", launcher=True),
    Case("train-run-dir-read-only", run_dir_at(lambda t: tmpfs(t, "1m", read_only=True) / "run"), "read-only file system", launcher=True),
    Case("train-run-dir-in-use", run_dir_at(run_dir_in_use), "another run is using it (pid", launcher=True),
    Case("train-disk-full-checkpointing", run_dir_at(lambda t: tmpfs(t, "96k") / "run", schedule={"total_steps": 4, "warmup_steps": 1}, checkpoint={"every": 2}),
         "disk full while checkpointing", launcher=True, changes=("mnt/run/config.yaml", "mnt/run/config.resolved.yaml", "mnt/run/metrics.jsonl")),
    Case("train-deepspeed-refuses-extra", run_dir_at(lambda t: t / "run", deepspeed={"extra": {"zero_optimization": {"reduce_bucket_size": -5}}}),
         "DeepSpeed refuses the resulting config", launcher=True),
    # exports that predict reads: a tampered value is refused as the export is read, naming file and key
    Case("predict-export-num-heads-negative", predict_tampered("model.yaml", "num_heads", -8), "model.yaml: num_heads: must be in 1..1024, got -8"),
    Case("predict-export-num-layers-huge", predict_tampered("model.yaml", "num_layers", 100000), "model.yaml: num_layers: must be in 1..1024"),
    Case("predict-export-svd-rank-negative", predict_tampered("export.json", "shards.transform.svd_rank", -1),
         "export.json: shards.transform.svd_rank: must be in 0..65536, got -1"),
    Case("predict-export-max-nodes-text", predict_tampered("export.json", "shards.transform.max_nodes", "x"),
         "export.json: shards.transform.max_nodes: expected an integer, got 'x'"),
    Case("predict-export-transform-a-list", predict_tampered("export.json", "shards.transform", ["spd"]),
         "export.json: shards.transform: expected a mapping, got list"),
    Case("predict-export-shards-a-string", predict_tampered("export.json", "shards", "shards/tpsa"), "export.json: shards: expected a mapping, got str"),
    Case("predict-export-unknown-graph-feature-generator",
         predict_tampered("export.json", "shards.features.graph", {"generators": ["ecfp6"], "dim": 4096}),
         "export.json: shards.features.graph.generators[0]: 'ecfp6' is not one of"),
    Case("predict-export-target-scale-nan", predict_tampered("export.json", "task.target_scale", float("nan")),
         "export.json: task.target_scale: must be > 0"),
    Case("predict-export-target-shift-infinite", predict_tampered("export.json", "task.target_shift", [float("inf")]),
         "export.json: task.target_shift: must be finite"),
    Case("predict-export-target-names-wrong-length", predict_tampered("export.json", "shards.task.target_names", ["tpsa", "tpsa2"]),
         "export.json: shards.task.target_names: 2 names for the 1 output(s)"),
    Case("predict-svr-coef-nan", predict_tensor("coef", _nan_first), "model.pt: tensor coef holds NaN or infinity"),
    Case("predict-svr-intercept-nan", predict_tensor("intercept", _nan_first), "model.pt: tensor intercept holds NaN or infinity"),
    Case("predict-svr-support-wrong-shape", predict_tensor("support", lambda t: t[:, :64]), "model.pt: its support"),
    Case("predict-svr-c-negative", predict_tampered("model.yaml", "C", -1.0, kind="svr"), "model.yaml: C: must be > 0"),
    Case("predict-kernel-gamma-negative", predict_tampered("model.yaml", "gamma", -1.0, kind="kernel"), "model.yaml: gamma: must be > 0, got -1.0"),
    Case("predict-kernel-gamma-infinite", predict_tampered("model.yaml", "gamma", float("inf"), kind="kernel"), "model.yaml: gamma: must be > 0, got inf"),
    Case("predict-kernel-support-vector-nan", predict_tensor("z", _nan_first, kind="kernel"), "model.pt: tensor z holds NaN or infinity"),
    Case("predict-kernel-backbone-num-heads", predict_tampered("model.yaml", "backbone.num_heads", -8, kind="kernel"),
         "model.yaml: backbone.num_heads: must be in 1..1024"),
    # foreign checkpoints: Graphormer options
    Case("import-graphormer-table-option-disagrees",
         lambda tmp, inputs: (graphormer_checkpoint(tmp, inputs, num_atoms=9 * 400), tmp), "option num_atoms=3600, but"),
    Case("import-graphormer-hop-count-beyond-its-table",
         lambda tmp, inputs: (graphormer_checkpoint(tmp, inputs, multi_hop_max_dist=9), tmp),
         "ckpt.pt: GraphormerConfig: multi_hop_max_dist 9 must be between 1 and num_edge_dis 6"),
    Case("import-checkpoint-cut-at-64-kib", cut_checkpoint, "ckpt.pt: not a readable PyTorch checkpoint (cut short: a zip archive of 65,536 bytes"),
    # weak checks
    Case("inspect-verify-shard-linked-from-outside", shard_linked_from_outside("--verify"), "a symbolic link leads out of the shard folder",
         code=1),
    Case("inspect-shard-linked-from-outside", shard_linked_from_outside(), "a symbolic link leads out of the shard folder"),
    Case("graph-info-corrupt-store", graph_info_corrupt, "indices.npy: row"),
    Case("bench-compile-cache-open-subfolder", compile_cache_open_inside, "fxgraph is writable by others"),
    Case("resume-auto-corrupt-newest", run_with(lambda c: truncate(optim_states(c / TAGS[-1])), resume="auto"),
         f"resuming from the older complete checkpoint {TAGS[0]} instead", code=0, launcher=True, changes=EVERYTHING),
]


# --- running a case -----------------------------------------------------------------------------
def files(folder: Path) -> dict[str, str]:
    """Every file's digest, but the run lock's: `gtscale train` takes it first thing (run_lock.py)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tpsa_shards) -> Inputs:
    root = tmp_path_factory.mktemp("bad_inputs")
    shards = tpsa_shards
    cfg = write_config(root / "run.yaml", shards, root / "run", data=NO_WORKERS, schedule={"total_steps": 4, "warmup_steps": 1}, checkpoint={"every": 2, "keep": 2})
    assert run_ranks(1, [str(cfg)], root / "log") == [0], logs(root / "log")
    assert main(["export", str(root / "run"), "--tag", "latest", "--out", str(root / "export")]) == 0
    return Inputs(shards=shards, run=root / "run", export=root / "export")


@pytest.fixture(autouse=True)
def unmount():
    """Unmount the cases' tmpfs and end their lock holders, also when a case fails."""
    yield
    while HOLDERS:
        holder = HOLDERS.pop()
        holder.kill()
        holder.wait()
    while MOUNTS:
        subprocess.run(["umount", str(MOUNTS.pop())], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, inputs: Inputs, tmp_path: Path, capsys, request):
    argv, watched = case.prepare(tmp_path, inputs)
    if case.cleanup is not None:
        request.addfinalizer(lambda: case.cleanup(tmp_path))
    before = files(watched)
    if case.launcher:
        codes = run_ranks(1, argv, tmp_path / "log")
        code, out, err = codes[0], "", (tmp_path / "log" / "rank0.log").read_text()
        err = "\n".join(line for line in err.splitlines() if "error" in line or "warning:" in line)  # DeepSpeed logs around it
    else:
        code = main(argv)
        out, err = capsys.readouterr()
    assert code == case.code, (out, err)
    if case.code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and case.fragment in lines[0], err
    else:
        assert case.fragment in out + err, (out, err)
    after = files(watched)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert all(p.startswith(case.changes) for p in changed), sorted(changed)
    assert not (watched / "marker").exists() and not (tmp_path / "marker").exists()
