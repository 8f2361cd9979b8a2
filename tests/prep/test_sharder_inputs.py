"""Sharder input problems: --out, missing values, reruns with another plan or other code."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from gtscale.cli import main
from gtscale.format import schema
from gtscale.format.tario import iter_shard


def shard(*args: str) -> int:
    return main(["shard", *args, "--no-progress"])


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


CSV = "smiles,id,split,y\nCCO,a,train,1\nc1ccccc1,b,train,2\nCC(=O)O,c,test,3\nCCN,d,test,4\n"


def write_csv(tmp_path, text=CSV) -> Path:
    path = tmp_path / "mols.csv"
    path.write_text(text)
    return path


def csv_args(path: Path, out: Path, *extra: str) -> list[str]:
    return ["smiles-csv", "--input", str(path), "--id-column", "id", "--split-column", "split", "--target-columns", "y", "--out", str(out), *extra]


def test_out_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("mine")
    assert shard(*csv_args(write_csv(tmp_path), target)) == 2
    assert f"{target}: --out needs a folder here, but this is a file" in one_error_line(capsys)
    assert target.read_text() == "mine"


def read_only_folder(tmp_path) -> Path:
    """A folder this process cannot create files in (root ignores chmod: use /sys then)."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_unwritable_parts_folder_leaves_nothing_half_written(tmp_path, capsys):
    out = tmp_path / "out"
    assert shard(*csv_args(write_csv(tmp_path), out)) == 0  # gtscale's folder: a rerun may write here
    shutil.rmtree(out / "parts")
    (out / "parts").symlink_to(read_only_folder(tmp_path), target_is_directory=True)
    before = files(out)
    capsys.readouterr()
    assert shard(*csv_args(write_csv(tmp_path), out, "--shard-size", "1")) == 2
    assert "cannot write in this folder" in one_error_line(capsys)
    assert files(out) == before  # no new plan, no shard without its part file


def test_missing_values_read_by_pandas(tmp_path, capsys):
    path = write_csv(tmp_path, "smiles,id,split,y\nCCO,a,train,1\n,b,train,2\nCC(=O)O,,test,3\n")
    out = tmp_path / "out"
    assert shard(*csv_args(path, out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["rejected"] == {"empty_smiles": 1}
    metas = [rec["meta"] for s in ("train", "test") for sh in manifest["splits"][s]["shards"] for _, rec in iter_shard(out / sh["path"])]
    assert {m.get("name") for m in metas} == {"a", None}  # the blank id is left out, not NaN


def test_blank_split_label_names_the_row(tmp_path, capsys):
    path = write_csv(tmp_path, "smiles,id,split,y\nCCO,a,train,1\nCCN,b,,2\n")
    assert shard(*csv_args(path, tmp_path / "out")) == 2
    line = one_error_line(capsys)
    assert str(path) in line and "data row 2 has a blank split label" in line
    assert not (tmp_path / "out").exists()


def test_rerun_with_another_shard_size_removes_the_old_plan(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["nci-tpsa", "--out", str(out), "--lap-k", "0", "--svd-rank", "0", "--max-nodes", "12"]
    assert shard(*args, "--shard-size", "100") == 0
    old = set(files(out))
    assert shard(*args, "--shard-size", "300") == 0  # fewer shards: train-000014… are the old plan's
    assert "of an earlier plan" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {s["path"] for info in manifest["splits"].values() for s in info["shards"]}
    on_disk = {p for p in files(out) if p.endswith(".tar")}
    parts = {p for p in files(out) if p.startswith("parts/")}
    assert on_disk == listed and len(listed) < len({p for p in old if p.endswith(".tar")})
    assert parts == {f"parts/{Path(p).stem}.json" for p in listed}


def test_record_code_change_redoes_the_shards(tmp_path, monkeypatch):
    """A featurizer fix must not leave the old shards standing as complete."""
    from gtscale.prep import writer

    out = tmp_path / "out"
    args = ["nci-tpsa", "--out", str(out), "--lap-k", "0", "--svd-rank", "0", "--max-nodes", "12", "--shard-size", "5000"]
    assert shard(*args) == 0
    plan = json.loads((out / "plan.json").read_text())
    monkeypatch.setattr(writer, "code_version", lambda: "a fixed featurizer")
    assert shard(*args) == 0
    assert json.loads((out / "plan.json").read_text())["fingerprint"] != plan["fingerprint"]
    part = json.loads(next((out / "parts").glob("*.json")).read_text())
    assert part["fingerprint"] != plan["fingerprint"]  # rewritten under the new code


def test_code_version_ignores_comments_but_not_code(monkeypatch, tmp_path):
    import importlib.util

    from gtscale.prep import writer

    def version_of(source: str) -> str:
        path = tmp_path / f"m{abs(hash(source))}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setattr(writer, "RECORD_CODE", (module,))
        return writer.code_version()

    base = version_of("def f(x):\n    return x + 1\n")
    assert version_of("def f(x):  # a note\n\n    return x + 1\n") == base
    assert version_of("def f(x):\n    return x + 2\n") != base


def test_produced_by_names_flags_the_sharder_has():
    import argparse

    from gtscale.cli.shard import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {opt for action in parser._actions for opt in action.option_strings}
    for key, produced in schema.PRODUCED.items():
        named = {word.strip("`(),") for word in produced.how.split() if word.startswith(("--", "`--"))}
        assert named <= flags, (key, named - flags)
    assert "without --no-spd" in schema.PRODUCED[schema.SPD].how


DUPLICATES = "smiles,id,split,y\nCCO,a,train,1\nc1ccccc1,b,train,2\nOCC,c,test,3\nC(C)O,d,test,4\nCCN,e,valid,5\nNCC,f,train,6\n"


def test_duplicates_are_counted_and_warned(tmp_path, capsys):
    out = tmp_path / "out"
    assert shard(*csv_args(write_csv(tmp_path, DUPLICATES), out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    # CCO = OCC = C(C)O: two repeats, both in test; CCN (valid) repeats NCC (train, met first).
    assert manifest["duplicates"] == {"molecules": 3, "across_splits": 3, "dropped": 0}
    assert "warning: 3 records repeat an earlier molecule" in capsys.readouterr().err


def test_drop_duplicates_keeps_the_training_copy(tmp_path, capsys):
    out = tmp_path / "out"
    assert shard(*csv_args(write_csv(tmp_path, DUPLICATES), out, "--drop-duplicates")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["duplicates"] == {"molecules": 0, "across_splits": 0, "dropped": 3}
    assert {s: i["samples"] for s, i in manifest["splits"].items()} == {"train": 3, "test": 0, "valid": 0}
    assert manifest["splits"]["test"]["rejected"] == {"duplicate": 2}
    for info in manifest["splits"].values():
        assert info["samples"] + sum(info["rejected"].values()) == info["rows"]
    rejects = (out / "rejects.tsv").read_text().splitlines()[1:]
    assert sorted(rejects) == ["2\ttest\tduplicate_of:0", "3\ttest\tduplicate_of:0", "4\tvalid\tduplicate_of:5"]
    assert "warning" not in capsys.readouterr().err


def test_drop_duplicates_computes_each_molecule_key_once(tmp_path, monkeypatch):
    """--drop-duplicates needs every key before planning; the shard tasks reuse them (a canonical
    SMILES is ~0.08 ms a molecule) and their part files hold the same keys as a run without it."""
    from gtscale.prep import featurize, writer

    calls = []
    original = featurize.molecule_key

    def counted(mol):
        calls.append(1)
        return original(mol)

    monkeypatch.setattr(featurize, "molecule_key", counted)
    monkeypatch.setattr(writer, "molecule_key", counted)
    text = DUPLICATES + "not_a_smiles,g,train,7\n"
    dropped, kept_all = tmp_path / "dropped", tmp_path / "all"
    assert shard(*csv_args(write_csv(tmp_path, text), dropped, "--drop-duplicates")) == 0
    assert len(calls) == 6  # the six rows that parse, once each
    calls.clear()
    assert shard(*csv_args(write_csv(tmp_path, text), kept_all)) == 0
    assert len(calls) == 6

    def keys(out):
        return {idx: key for part in (out / "parts").glob("*.json") for idx, key in json.loads(part.read_text())["keys"]}

    with_drop, without = keys(dropped), keys(kept_all)
    assert sorted(with_drop) == [0, 1, 5] and all(without[idx] == key for idx, key in with_drop.items())


def test_infinite_targets_are_rejected_per_molecule_and_counted(tmp_path):
    """inf (and 1e39, inf as float32) once reached training and crashed its first evaluation; NaN
    stays what it means: a missing label."""
    out = tmp_path / "out"
    text = "smiles,id,split,y\nCCO,a,train,1\nCCN,b,train,inf\nCCC,c,train,-1e39\nCCCC,d,train,\nCCCO,e,test,2\n"
    assert shard(*csv_args(write_csv(tmp_path, text), out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["rejected"] == {"target_not_finite": 2}
    assert manifest["splits"]["train"]["samples"] == 2  # a and d (d's label missing)
    rejects = sorted((out / "rejects.tsv").read_text().splitlines()[1:])
    assert rejects == ["1\ttrain\ttarget_not_finite", "2\ttrain\ttarget_not_finite"]
    ys = [np.asarray(r[schema.Y]) for shard_path in sorted((out / "train").glob("*.tar")) for _, r in iter_shard(shard_path)]
    assert all(not np.isinf(y).any() for y in ys) and len(ys) == 2


def test_a_target_column_without_a_finite_value_is_refused(tmp_path, capsys):
    """Once it trained silently on nothing (loss 0.0)."""
    path = write_csv(tmp_path, "smiles,id,split,y,z\nCCO,a,train,1,\nCCN,b,test,2,inf\n")
    args = ["smiles-csv", "--input", str(path), "--id-column", "id", "--split-column", "split", "--target-columns", "y,z",
            "--out", str(tmp_path / "out")]
    assert shard(*args) == 2
    line = one_error_line(capsys)
    assert "mols.csv: target column 'z' has no finite value" in line, line
    assert not (tmp_path / "out").exists()


def test_molecules_too_large_are_rejected_before_rdkit_reads_them(tmp_path):
    """A user's CSV may hold any string: a 10 MB SMILES line took RDKit 37 s and 5 GB before the
    structure work began, a 5,000-atom chain minutes and gigabytes more. smiles-csv rejects them
    from the string (molecule_limits), by default above 512 atoms; --max-nodes moves the cap."""
    chain = "C" * 600
    text = f"smiles,id,split,y\nCCO,a,train,1\n{'C' * 10_000_000},b,train,2\n{chain},c,train,3\nCCN,d,test,4\n"
    out = tmp_path / "out"
    assert shard(*csv_args(write_csv(tmp_path, text), out, "--lap-k", "0", "--svd-rank", "0")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["transform"]["max_nodes"] == 512
    assert manifest["splits"]["train"]["rejected"] == {"smiles_too_long": 1, "too_many_nodes": 1}
    assert sorted((out / "rejects.tsv").read_text().splitlines()[1:]) == ["1\ttrain\tsmiles_too_long", "2\ttrain\ttoo_many_nodes"]
    wider = tmp_path / "wider"
    assert shard(*csv_args(write_csv(tmp_path, text), wider, "--lap-k", "0", "--svd-rank", "0", "--max-nodes", "600")) == 0
    assert json.loads((wider / "manifest.json").read_text())["splits"]["train"]["rejected"] == {"smiles_too_long": 1}


def compressed(path: Path, kind: str) -> Path:
    """`path` written as `kind`: what pandas reads with the standard library, and what it cannot."""
    import bz2
    import gzip
    import lzma
    import tarfile
    import zipfile

    data = path.read_bytes()
    if kind in ("gz", "bz2", "xz"):
        target = path.with_name(f"{path.name}.{kind}")
        target.write_bytes({"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](data))
    elif kind in ("zip", "zip-of-two"):
        target = path.with_name(f"{path.name}.zip")
        with zipfile.ZipFile(target, "w") as archive:
            archive.writestr(path.name, data)
            if kind == "zip-of-two":
                archive.writestr("notes.csv", data)
    elif kind == "tar.gz":
        target = path.with_name(f"{path.name}.tar.gz")
        with tarfile.open(target, "w:gz") as archive:
            archive.add(path, arcname=path.name)
    elif kind == "damaged-xz":
        target = path.with_name(f"{path.name}.xz")
        target.write_bytes(lzma.compress(data)[:-20])
    else:  # zst, read only where the zstandard module is installed
        target = path.with_name(f"{path.name}.zst")
        target.write_bytes(b"\x28\xb5\x2f\xfd" + data)
    return target


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz", "zip"])
def test_compressed_csvs_shard_like_the_plain_one(tmp_path, kind):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    assert shard(*csv_args(write_csv(tmp_path), plain, "--lap-k", "0", "--svd-rank", "0")) == 0
    assert shard(*csv_args(compressed(write_csv(tmp_path), kind), packed, "--lap-k", "0", "--svd-rank", "0")) == 0
    samples = [json.loads((out / "manifest.json").read_text())["splits"]["train"]["samples"] for out in (plain, packed)]
    assert samples == [2, 2]


@pytest.mark.parametrize("kind, message", [
    ("zip-of-two", "a .zip of 2 files (mols.csv, notes.csv); give a .zip of one CSV"),
    ("tar.gz", "a tar archive; give the CSV itself"),
    ("damaged-xz", "not a readable CSV"),
    pytest.param("zst", "reading .zst needs the zstandard module", marks=pytest.mark.skipif(
        importlib.util.find_spec("zstandard") is not None, reason="zstandard is installed: .zst is read")),
])
def test_a_compressed_csv_pandas_cannot_read_is_one_line(tmp_path, capsys, kind, message):
    path = compressed(write_csv(tmp_path), kind)
    assert shard(*csv_args(path, tmp_path / "out")) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gtscale shard: error: {path}: ") and message in line, line
    assert not (tmp_path / "out").exists()
