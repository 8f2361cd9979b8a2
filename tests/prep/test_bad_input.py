"""Bad input: one clear line naming the file or option, exit status 2, nothing written."""

import pickle
import subprocess
import sys

import pytest

from fixtures_ogb import write_ogbg_mol, write_pcqm4mv2
from gtscale.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gtscale.cli", *args], capture_output=True, text=True)


def assert_one_line_error(result, *needles):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_unknown_dataset(tmp_path):
    result = run_cli("shard", "zinc-full", "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "zinc-full", "unknown dataset")
    assert not (tmp_path / "o").exists()


def test_missing_source_file(tmp_path):
    root = write_pcqm4mv2(tmp_path / "raw", count=20)
    (root / "pcqm4m-v2" / "split_dict.pt").unlink()
    result = run_cli("shard", "pcqm4mv2", "--root", str(root), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "split_dict.pt", "not found")
    assert not (tmp_path / "o").exists()


def test_malformed_csv(tmp_path):
    root = write_ogbg_mol(tmp_path / "raw", "ogbg-molhiv", count=20)
    (root / "ogbg_molhiv" / "mapping" / "mol.csv.gz").write_bytes(b"\x1f\x8b\x08garbage")
    result = run_cli("shard", "ogbg-molhiv", "--root", str(root), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "mol.csv.gz")
    assert not (tmp_path / "o").exists()


def test_missing_column(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("smiles,a\nCCO,1\n")
    result = run_cli("shard", "smiles-csv", "--input", str(path), "--target-columns", "b", "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "m.csv", "'b'")


def test_split_dict_holding_code_is_refused(tmp_path):
    root = write_pcqm4mv2(tmp_path / "raw", count=20)

    class Exploit:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(root / "pcqm4m-v2" / "split_dict.pt", "wb") as f:
        pickle.dump({"train": Exploit()}, f)
    result = run_cli("shard", "pcqm4mv2", "--root", str(root), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "split_dict.pt")
    assert "pwned" not in result.stdout


@pytest.mark.parametrize("keep", [0, 19, 200])
def test_split_dict_cut_short_is_unreadable_not_refused(tmp_path, keep, capsys):
    """A legacy torch file cut short: EOFError, struct.error and IndexError escaped as tracebacks,
    and what was caught read "refused … would run code"."""
    import torch

    root = write_pcqm4mv2(tmp_path / "raw", count=20)
    path = root / "pcqm4m-v2" / "split_dict.pt"
    torch.save({"train": torch.arange(5)}, path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes()[:keep])
    assert main(["shard", "pcqm4mv2", "--root", str(root), "--out", str(tmp_path / "o")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "split_dict.pt: not a readable torch file" in err[0] and "refused" not in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", [["--workers", "0"], ["--part", "2", "--num-parts", "2"], ["--shard-size", "0"], ["--svd-rank", "-1"]])
def test_bad_options(tmp_path, option, capsys):
    assert main(["shard", "nci-tpsa", "--out", str(tmp_path / "o"), *option]) == 2
    assert option[0] in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_inspect_verify_catches_corruption(tmp_path, capsys):
    out = tmp_path / "o"
    root = write_ogbg_mol(tmp_path / "raw", "ogbg-molhiv", count=40)
    assert main(["shard", "ogbg-molhiv", "--root", str(root), "--out", str(out), "--no-progress"]) == 0
    assert main(["inspect", str(out), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().out
    tar = next(out.rglob("train-000000.tar"))
    data = bytearray(tar.read_bytes())
    data[700] ^= 0xFF
    tar.write_bytes(bytes(data))
    assert main(["inspect", str(out), "--verify"]) == 1
    assert "sha256 differs" in capsys.readouterr().out


def test_split_file_with_text_rows(tmp_path):
    root = write_ogbg_mol(tmp_path / "raw", "ogbg-molhiv", count=20)
    import gzip

    with gzip.open(root / "ogbg_molhiv" / "split" / "scaffold" / "valid.csv.gz", "wt") as f:
        f.write("3\nabc\n")
    result = run_cli("shard", "ogbg-molhiv", "--root", str(root), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "valid.csv.gz", "integer")
    assert not (tmp_path / "o").exists()


def test_corrupt_part_file_and_missing_shard(tmp_path, capsys):
    out = tmp_path / "o"
    root = write_ogbg_mol(tmp_path / "raw", "ogbg-molhiv", count=40)
    assert main(["shard", "ogbg-molhiv", "--root", str(root), "--out", str(out), "--no-progress"]) == 0
    part = next((out / "parts").glob("train-*.json"))
    part.write_text("{not json")
    assert main(["merge-parts", str(out)]) == 2
    assert part.name in capsys.readouterr().err
    next(out.rglob("train-000000.tar")).unlink()
    assert main(["inspect", str(out), "--split", "train"]) == 2
    assert "missing" in capsys.readouterr().err
