"""`gtscale fit`'s output folder: a rerun replaces and removes only what a fit wrote there (its
record, written.json), never a user's file beside or inside an export; one fit at a time; what can
be refused is refused before the work, and Ctrl-C is one line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gtscale.errors import UserError
from gtscale.fit import fit
from gtscale.fit.written import RECORD
from gtscale.prep.sources.bundled import read_nci_tpsa

ROWS = 150


@pytest.fixture(scope="module")
def molecules_csv(tmp_path_factory) -> Path:
    table = read_nci_tpsa()
    path = tmp_path_factory.mktemp("fit-folder") / "mols.csv"
    pd.DataFrame({"smiles": table.smiles[:ROWS], "y": table.targets[:ROWS, 0]}).to_csv(path, index=False)
    return path


def user_files(out: Path) -> dict[Path, str]:
    """A user's note in every folder fit wrote, and one beside them."""
    notes = {out / "notes.txt": "mine"}
    notes |= {folder / "my-notes.txt": f"notes on {folder.name}" for folder in [*out.glob("export/*"), *out.glob("members/*")] if folder.is_dir()}
    for path, text in notes.items():
        path.write_text(text)
    return notes


def test_a_rerun_with_another_recipe_removes_only_what_fit_wrote(molecules_csv, tmp_path):
    out = tmp_path / "x"
    fit([molecules_csv], out, recipe="kernel", progress=False)
    notes = user_files(out)
    assert (out / "members" / "kernel" / "my-notes.txt") in notes
    report = fit([molecules_csv], out, recipe="ecfp", progress=False)
    assert {path: path.read_text() for path in notes} == notes  # every user file as it was
    assert not (out / "members" / "kernel" / "model.pt").exists()  # the earlier fit's kernel member is gone
    assert sorted(p.name for p in (out / "members" / "kernel").iterdir()) == ["my-notes.txt"]
    removed, kept = report["earlier_fit"]["removed"], report["earlier_fit"]["kept"]
    assert "members/kernel/model.pt" in removed and kept["members/kernel/my-notes.txt"] == "not written by gtscale fit"
    assert "- removed members/kernel/model.pt" in (out / "report.md").read_text()
    assert set(json.loads((out / RECORD).read_text())["files"]) >= {"members/ecfp/model.pt", "report.md", "export/ensemble.json"}
    # back to the kernel recipe: members/kernel now holds the user's notes alone, no export to write beside
    with pytest.raises(UserError, match=r"/kernel: fit writes an export here, but it holds files gtscale did not write \(my-notes.txt\)"):
        fit([molecules_csv], out, recipe="kernel", progress=False)
    assert {path: path.read_text() for path in notes} == notes


def test_a_file_fit_wrote_and_a_user_changed_is_kept(molecules_csv, tmp_path):
    out = tmp_path / "x"
    fit([molecules_csv], out, recipe="kernel", progress=False)
    edited = out / "members" / "kernel" / "model.yaml"
    edited.write_text(edited.read_text() + "# my change\n")
    report = fit([molecules_csv], out, recipe="ecfp", progress=False)
    assert edited.read_text().endswith("# my change\n") and report["earlier_fit"]["kept"]["members/kernel/model.yaml"] == "changed since gtscale fit wrote it"
    assert not (out / "members" / "kernel" / "model.pt").exists()


def test_a_folder_fit_finished_before_it_kept_a_record_loses_only_its_export_files(molecules_csv, tmp_path):
    out = tmp_path / "x"
    fit([molecules_csv], out, recipe="kernel", progress=False)
    (out / RECORD).unlink()  # as an earlier version of fit left it
    notes = user_files(out)
    fit([molecules_csv], out, recipe="ecfp", progress=False)
    assert {path: path.read_text() for path in notes} == notes
    assert not (out / "members" / "kernel" / "model.pt").exists()


def test_a_users_file_where_fit_would_write_is_refused_before_the_work(molecules_csv, tmp_path):
    """A folder a failed fit left (its stub report.json) is fit's; everything else in it the user's."""
    out = tmp_path / "x"
    (out / "members" / "ecfp").mkdir(parents=True)
    (out / "report.json").write_text(json.dumps({"format": "gtscale-fit", "finished": False}))
    (out / "members" / "ecfp" / "model.yaml").write_text("my own model\n")
    with pytest.raises(UserError, match=r"members/ecfp/model.yaml: gtscale fit would write this file, but it did not write"):
        fit([molecules_csv], out, recipe="ecfp", progress=False)
    assert (out / "members" / "ecfp" / "model.yaml").read_text() == "my own model\n"


def test_a_second_fit_into_a_folder_in_use_is_refused(molecules_csv, tmp_path):
    """A fit holds its --out as training holds its run_dir: the other one is refused, in one line naming its holder."""
    out = tmp_path / "x"
    hold = "import sys, time; from gtscale.train import run_lock; run_lock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=r"--out .*x: another gtscale fit is using it \(pid \d+ on host"):
            fit([molecules_csv], out, recipe="ecfp", progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in out.iterdir()) == ["run.lock"]
    fit([molecules_csv], out, recipe="ecfp", progress=False)  # once it has ended, the folder is free


def test_targets_of_one_value_are_refused_before_the_work(molecules_csv, tmp_path):
    frame = pd.read_csv(molecules_csv).assign(y=5.51)
    frame.to_csv(tmp_path / "equal.csv", index=False)
    with pytest.raises(UserError, match=r"equal.csv: every train and valid row holds 5.51 in target column 'y'; fit needs targets that vary"):
        fit([tmp_path / "equal.csv"], tmp_path / "x", recipe="ecfp", progress=False)
    assert not (tmp_path / "x").exists()  # a fit refused before its work leaves no folder behind
    frame.assign(y=1).to_csv(tmp_path / "ones.csv", index=False)
    with pytest.raises(UserError, match=r"ones.csv: every train and valid row holds 1 in target column 'y'; fit needs both labels, 0 and 1"):
        fit([tmp_path / "ones.csv"], tmp_path / "x", progress=False)


def test_ctrl_c_ends_fit_with_one_line_and_130(molecules_csv, tmp_path):
    fit_command = [sys.executable, "-m", "gtscale.cli", "fit", str(molecules_csv), "--target-columns", "y", "--out", str(tmp_path / "x")]
    run = subprocess.Popen(fit_command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert next(line for line in run.stdout if not line.startswith("plan: ")).startswith("train: ")  # under way
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130 and err == "gtscale fit: interrupted\n"
    assert json.loads((tmp_path / "x" / "report.json").read_text()) == {"format": "gtscale-fit", "finished": False}
