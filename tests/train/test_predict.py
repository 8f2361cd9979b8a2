"""`gtscale predict` on a tiny trained export: the same predictions as `gtscale evaluate` gives for
the same molecules, an ensemble's mean and std over its members, and rows RDKit cannot read."""

import csv
import io
import json
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gtscale.cli import main
from gtscale.prep.sources.bundled import read_nci_tpsa
from gtscale.prep.sources.descriptors import descriptor_names
from export_fixtures import save_tensors

pytestmark = pytest.mark.slow


def tpsa_csv(path: Path, rows: int = 160) -> Path:
    """The first `rows` NCI molecules with TPSA, split 60/20/20 by row number."""
    table = read_nci_tpsa()
    split = ["valid" if i % 5 == 3 else "test" if i % 5 == 4 else "train" for i in range(rows)]
    pd.DataFrame({"smiles": table.smiles[:rows], "tpsa": table.targets[:rows, 0], "split": split}).to_csv(path, index=False)
    return path


def train_tiny(shards: Path, run_dir: Path, model_overrides: dict | None = None) -> Path:
    """Three steps of a tiny EGT in one process; returns the run folder."""
    config = run_dir.parent / f"{run_dir.name}.yaml"
    config.write_text(yaml.safe_dump({
        "run_dir": str(run_dir),
        "data": {"shards": str(shards), "loader": {"batching": "graphs", "batch_size": 16, "num_workers": 0}},
        "model": "egt-small",
        "model_overrides": {"num_layers": 1, "node_width": 16, "edge_width": 4, "num_heads": 2, "num_virtual_nodes": 1,
                            "svd_rank": 4, **(model_overrides or {})},
        "task": {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [16]}, "target_shift": 60.0, "target_scale": 40.0},
        "optimizer": {"lr": 1e-3}, "schedule": {"total_steps": 3, "warmup_steps": 1},
        "checkpoint": {"every": 1000}, "eval": {"every": 0}, "logging": {"every": 1, "tensorboard": False, "progress": False},
    }))
    done = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(shard folder, the CSV it was made from, run folder, evaluate's test predictions by idx, export),
    trained on shards with molecule-level features (Morgan bits, standardised RDKit descriptors)
    and EGT's SVD encodings (the same for a molecule in a predict batch as in its shard)."""
    root = tmp_path_factory.mktemp("predict")
    csv = tpsa_csv(root / "tpsa.csv")
    shards = root / "shards"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(shards), "--no-progress", "--lap-k", "0", "--svd-rank", "4", "--graph-features", "morgan2048,rdkit2d"]) == 0
    run_dir = train_tiny(shards, root / "run")
    assert main(["evaluate", str(run_dir), "--split", "test", "--tag", "latest"]) == 0
    saved = np.load(next((run_dir / "eval").glob("test-step-*.npz")))
    export = next((run_dir / "export").glob("step-*"))
    model_cfg = yaml.safe_load((export / "model.yaml").read_text())
    assert model_cfg["head"]["graph_features"] == 2048 + len(descriptor_names())  # the head read them
    return shards, csv, run_dir, dict(zip(saved["idx"].tolist(), saved["y_pred"][:, 0].tolist())), export


def test_predict_equals_evaluate_and_marks_invalid_rows(trained, tmp_path):
    shards, csv, _, evaluated, export = trained
    frame = pd.read_csv(csv)
    test = frame[frame["split"] == "test"].copy()
    test["row"] = test.index  # smiles-csv idx = row number
    bad = pd.DataFrame({"smiles": ["C1CC", "", "not a molecule"], "row": [-1, -2, -3]})
    mixed = pd.concat([test.iloc[:5], bad, test.iloc[5:]], ignore_index=True)[["smiles", "row"]]
    mixed.to_csv(tmp_path / "mols.csv", index=False)
    assert main(["predict", str(export), "--input", str(tmp_path / "mols.csv"), "--out", str(tmp_path / "p.csv"),
                 "--batch-size", "7", "--no-progress"]) == 0
    out = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert list(out.columns) == ["smiles", "row", "tpsa_pred", "reason"] and len(out) == len(mixed)
    invalid = out[out["row"] < 0]
    assert invalid["reason"].tolist() == ["invalid_smiles", "empty_smiles", "invalid_smiles"]
    assert (invalid["tpsa_pred"] == "").all()  # an empty prediction, not a number
    valid = out[out["row"] >= 0]
    assert (valid["reason"] == "").all() and len(valid) == len(evaluated)
    predicted = valid["tpsa_pred"].astype(float).to_numpy()
    expected = np.array([evaluated[r] for r in valid["row"]])
    np.testing.assert_allclose(predicted, expected, rtol=1e-5, atol=1e-4)

    # a shard folder as input: the same records the evaluation read
    assert main(["predict", str(export), "--input", str(shards), "--splits", "test", "--out", str(tmp_path / "s.csv"), "--no-progress"]) == 0
    from_shards = pd.read_csv(tmp_path / "s.csv")
    assert set(from_shards["split"]) == {"test"} and from_shards["idx"].tolist() == sorted(evaluated)
    np.testing.assert_allclose(from_shards["tpsa_pred"], [evaluated[i] for i in from_shards["idx"]], rtol=1e-5, atol=1e-4)


def test_ensemble_mean_and_std_are_over_its_members(trained, tmp_path):
    _, csv, _, _, export = trained
    other = tmp_path / "other"
    shutil.copytree(export, other)
    state = torch.load(other / "model.pt", weights_only=True)
    last = max(k for k in state if k.startswith("head.") and k.endswith(".bias"))
    state[last] = state[last] + 0.5  # another member: every prediction moves by 0.5 × target_scale
    save_tensors(other, state)
    single = []
    for i, member in enumerate([export, other]):
        assert main(["predict", str(member), "--input", str(csv), "--out", str(tmp_path / f"{i}.csv"), "--no-progress"]) == 0
        single.append(pd.read_csv(tmp_path / f"{i}.csv")["tpsa_pred"].to_numpy())
    np.testing.assert_allclose(single[1] - single[0], 20.0, rtol=1e-4)
    assert main(["predict", str(export), str(other), "--input", str(csv), "--out", str(tmp_path / "e.csv"), "--no-progress"]) == 0
    ensemble = pd.read_csv(tmp_path / "e.csv")
    assert {"tpsa_mean", "tpsa_std", "reason"} <= set(ensemble.columns) and "tpsa" in ensemble.columns  # the input's own column kept
    np.testing.assert_allclose(ensemble["tpsa_mean"], (single[0] + single[1]) / 2, rtol=1e-5)
    np.testing.assert_allclose(ensemble["tpsa_std"], np.abs(single[1] - single[0]) / 2, rtol=1e-4)


def test_an_export_without_its_shards_record_is_refused(trained, tmp_path, capsys):
    _, csv, _, _, export = trained
    old = tmp_path / "old"
    shutil.copytree(export, old)
    (old / "export.json").write_text('{"run_dir": "x", "tag": "step-00000003", "parameters": 1}')
    assert main(["predict", str(old), "--input", str(csv), "--out", str(tmp_path / "p.csv")]) == 2
    assert "export.json: does not record the run's task and shards" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


def test_shards_with_other_graph_features_are_refused(trained, tmp_path, capsys):
    _, csv, _, _, export = trained
    plain = tmp_path / "plain"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa", "--split-column", "split",
                 "--out", str(plain), "--no-progress", "--lap-k", "0", "--svd-rank", "4"]) == 0
    assert main(["predict", str(export), "--input", str(plain), "--out", str(tmp_path / "p.csv")]) == 2
    assert "are not the ones" in capsys.readouterr().err and not (tmp_path / "p.csv").exists()
    assert main(["predict", str(export), "--input", str(csv), "--smiles-column", "SMILES", "--out", str(tmp_path / "p.csv")]) == 2
    assert "missing column 'SMILES'" in capsys.readouterr().err


def test_an_export_of_several_targets_predicts_each_of_them(tmp_path):
    """The export's head has one output per target (`gtscale export` once wrote the model YAML's
    num_outputs, 1, so predict refused every multi-target export, such as the MOSES pretraining's
    ten descriptors, as not fitting its model)."""
    csv = tpsa_csv(tmp_path / "tpsa.csv", rows=60)
    frame = pd.read_csv(csv)
    frame["tenth"] = frame["tpsa"] / 10
    frame.to_csv(csv, index=False)
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "tpsa,tenth", "--split-column", "split",
                 "--out", str(shards), "--no-progress", "--lap-k", "0", "--svd-rank", "4"]) == 0
    run_dir = train_tiny(shards, tmp_path / "run")
    assert yaml.safe_load((run_dir / "config.resolved.yaml").read_text())["num_targets"] == 2
    assert main(["export", str(run_dir), "--out", str(tmp_path / "export")]) == 0
    assert yaml.safe_load((tmp_path / "export" / "model.yaml").read_text())["head"]["num_outputs"] == 2
    assert main(["predict", str(tmp_path / "export"), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    out = pd.read_csv(tmp_path / "p.csv")
    assert {"tpsa_pred", "tenth_pred"} <= set(out.columns) and out[["tpsa_pred", "tenth_pred"]].notna().all().all()


# --- bad inputs: nothing lost, every row answered, nothing unbounded ------------------------------
def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def test_out_replaces_only_predicts_own_csv_and_never_the_input(trained, tmp_path, capsys):
    _, csv, _, _, export = trained
    notes = tmp_path / "notes.csv"
    notes.write_text("my,own\n1,2\n")
    predict = ["predict", str(export), "--input", str(csv), "--no-progress"]
    assert main([*predict, "--out", str(notes)]) == 2
    assert "notes.csv: --out would replace a file gtscale did not write" in one_error_line(capsys)
    assert notes.read_text() == "my,own\n1,2\n"
    assert main([*predict, "--out", str(notes), "--overwrite"]) == 0  # asked for
    assert main([*predict, "--out", str(notes)]) == 0  # predict's own output: a rerun replaces it
    assert pd.read_csv(notes).columns[-2:].tolist() == ["tpsa_pred", "reason"]

    before = csv.read_bytes()
    (tmp_path / "link.csv").symlink_to(csv)
    for out in (csv, tmp_path / "link.csv", export / "preds.csv"):
        capsys.readouterr()
        assert main([*predict, "--out", str(out), "--overwrite"]) == 2
        line = one_error_line(capsys)
        assert "--out is the input" in line or "--out is inside the input" in line, line
    assert csv.read_bytes() == before and not (export / "preds.csv").exists()


def test_every_input_row_gives_one_output_row_as_it_was_written(trained, tmp_path):
    """A blank line of a one-column CSV was dropped, so the predictions no longer lined up with the
    input; ids lost their leading zeros and "NA" became empty."""
    _, _, _, _, export = trained
    (tmp_path / "one.csv").write_text("smiles\nCCO\n\nc1ccccc1\n")
    (tmp_path / "ids.csv").write_text("id,smiles\n007,CCO\nNA,\n,CCN\n")
    for name, ids in (("one", None), ("ids", ["007", "NA", ""])):
        assert main(["predict", str(export), "--input", str(tmp_path / f"{name}.csv"), "--out", str(tmp_path / f"{name}-p.csv"),
                     "--no-progress"]) == 0
        out = pd.read_csv(tmp_path / f"{name}-p.csv", dtype=str, keep_default_na=False)
        assert len(out) == 3 and out["reason"].tolist() == ["", "empty_smiles", ""]
        assert (out["tpsa_pred"] == "").tolist() == [False, True, False]
        assert ids is None or out["id"].tolist() == ids


def test_weights_far_from_one_weigh_as_their_ratio(trained, tmp_path, capsys):
    """1e308 + 1e308 overflowed to inf and every mean came out 0.0."""
    _, csv, _, _, export = trained
    assert main(["predict", str(export), "--input", str(csv), "--out", str(tmp_path / "one.csv"), "--no-progress"]) == 0
    single = pd.read_csv(tmp_path / "one.csv")["tpsa_pred"].to_numpy()
    for weights in (["1e308", "1e308"], ["1e-320", "1e-320"], ["2", "0"]):
        assert main(["predict", str(export), str(export), "--weights", *weights, "--input", str(csv), "--out", str(tmp_path / "e.csv"),
                     "--no-progress"]) == 0
        ensemble = pd.read_csv(tmp_path / "e.csv")
        np.testing.assert_allclose(ensemble["tpsa_mean"], single, rtol=1e-6)
        np.testing.assert_allclose(ensemble["tpsa_std"], 0.0, atol=1e-6)
    for weights in (["inf", "1"], ["nan", "1"], ["-1", "2"], ["0", "0"], ["1"]):
        capsys.readouterr()
        assert main(["predict", str(export), str(export), "--weights", *weights, "--input", str(csv), "--out", str(tmp_path / "w.csv")]) == 2
        assert "--weights: give one weight per export (2), finite, >= 0 and not all 0" in one_error_line(capsys)
    assert not (tmp_path / "w.csv").exists()


def test_molecules_too_large_get_a_reason_before_rdkit_reads_them(trained, tmp_path):
    """An export whose shards set no --max-nodes (bundled datasets, or smiles-csv shards made before
    it had a default): a 10 MB SMILES line once crashed RDKit, and a 5,000-atom chain ran for
    minutes into gigabytes. Now the default cap (512 atoms) holds, and --max-nodes moves it."""
    export = Path(shutil.copytree(trained[-1], tmp_path / "export"))
    meta = json.loads((export / "export.json").read_text())
    assert meta["shards"]["transform"]["max_nodes"] == 512  # smiles-csv's default
    meta["shards"]["transform"]["max_nodes"] = None
    (export / "export.json").write_text(json.dumps(meta))
    pd.DataFrame({"smiles": ["CCO", "C" * 10_000_000, "C" * 600, "C" * 513]}).to_csv(tmp_path / "big.csv", index=False)
    predict = ["predict", str(export), "--input", str(tmp_path / "big.csv"), "--no-progress"]
    assert main([*predict, "--out", str(tmp_path / "p.csv")]) == 0
    out = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert out["reason"].tolist() == ["", "smiles_too_long", "too_many_nodes", "too_many_nodes"]
    assert main([*predict, "--out", str(tmp_path / "wide.csv"), "--max-nodes", "600"]) == 0
    wide = pd.read_csv(tmp_path / "wide.csv", keep_default_na=False)
    assert wide["reason"].tolist() == ["", "smiles_too_long", "", ""] and (wide["tpsa_pred"][[0, 2, 3]] != "").all()


def test_a_shard_folder_with_an_empty_split(trained, tmp_path, capsys):
    shards, _, _, evaluated, export = trained
    copy = Path(shutil.copytree(shards, tmp_path / "shards"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["splits"]["extra"] = {"rows": 0, "samples": 0, "shards": [], "rejected": {}}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["predict", str(export), "--input", str(copy), "--splits", "extra", "--out", str(tmp_path / "p.csv")]) == 2
    assert "--splits: split 'extra' of" in one_error_line(capsys) and not (tmp_path / "p.csv").exists()
    assert main(["predict", str(export), "--input", str(copy), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    out = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert set(out["split"]) == {"train", "valid", "test"} and (out["reason"] == "").all()
    assert len(out) == sum(manifest["splits"][s]["samples"] for s in ("train", "valid", "test"))


@pytest.mark.parametrize("suffix, error", [(".xz", None), (".bz2", None), (".zip", None), (".two.zip", "a .zip of 2 files")])
def test_compressed_inputs(trained, tmp_path, capsys, suffix, error):
    import bz2
    import lzma
    import zipfile

    _, csv, _, _, export = trained
    data = csv.read_bytes()
    path = tmp_path / f"mols.csv{suffix}"
    if suffix.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as archive:
            for name in ["mols.csv", "more.csv"][: 2 if suffix == ".two.zip" else 1]:
                archive.writestr(name, data)
    else:
        path.write_bytes({".xz": lzma.compress, ".bz2": bz2.compress}[suffix](data))
    code = main(["predict", str(export), "--input", str(path), "--out", str(tmp_path / "p.csv"), "--no-progress"])
    if error:
        assert code == 2 and error in one_error_line(capsys) and not (tmp_path / "p.csv").exists()
    else:
        assert code == 0 and len(pd.read_csv(tmp_path / "p.csv")) == len(pd.read_csv(csv))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sizes=st.lists(st.one_of(st.integers(1, 64), st.integers(1, 512)), min_size=1, max_size=150), batch_size=st.integers(1, 70))
def test_a_large_molecule_does_not_pad_a_whole_batch(sizes, batch_size):
    """Batches hold every molecule once, by size within each window of SORT_WINDOW batches (ties in
    input order), at most batch_size molecules and at most batch_size × 64² padded node pairs unless
    one molecule alone exceeds that; molecules of up to 64 atoms batch by count alone."""
    from gtscale.format.decode import Record
    from gtscale.inference import PAIRS_PER_MOLECULE, SORT_WINDOW, padded_batches

    records = [Record(str(i), "<input>", n, i, {}) for i, n in enumerate(sizes)]
    batches = padded_batches(records, batch_size)
    window = batch_size * SORT_WINDOW
    expected = [i for w in range(0, len(sizes), window) for i in sorted(range(w, min(w + window, len(sizes))), key=lambda i: (sizes[i], i))]
    assert [i for batch in batches for i in batch] == expected
    for batch in batches:
        pairs = len(batch) * max(sizes[i] for i in batch) ** 2
        assert len(batch) <= batch_size and (pairs <= batch_size * PAIRS_PER_MOLECULE or len(batch) == 1)
    if max(sizes) <= 64:
        assert [len(b) for b in batches] == [len(c) for c in np.array_split(sizes, range(batch_size, len(sizes), batch_size))]


def test_molecules_of_like_size_share_a_batch():
    """On NCI molecules in their file's order, batches in input order pad to several times the node
    pairs the molecules have; sorted within a window, to a fifth more."""
    from gtscale.format.decode import Record
    from gtscale.inference import padded_batches
    from gtscale.prep.sources.bundled import read_nci_tpsa
    from rdkit import Chem

    sizes = [Chem.MolFromSmiles(s).GetNumAtoms() for s in read_nci_tpsa().smiles[:2000]]
    records = [Record(str(i), "<input>", n, i, {}) for i, n in enumerate(sizes)]
    real = sum(n * n for n in sizes)

    def padded(batches):
        return sum(len(b) * max(sizes[i] for i in b) ** 2 for b in batches) / real

    in_order = [list(range(s, min(s + 64, len(sizes)))) for s in range(0, len(sizes), 64)]
    assert padded(in_order) > 4.0 and padded(padded_batches(records, 64)) < 1.25  # 5.6 and 1.18


# --- fuzzing the CSV input ---------------------------------------------------------------------
#: Molecules the fuzzed CSVs hold among their noise: each must be predicted as it is alone.
POOL = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CN1CCC[C@H]1c1cccnc1", "[NH4+].[Cl-]", "OC(=O)C(F)(F)F"]
ODD_CELLS = ["", " ", "NA", "nan", "None", "#N/A", "0", "-1e308", "reason", "C" * 600, "C" * 20_000, "x" * 200_000, "\ufeffCCO", "C\x00C"]
PREDICTED = ("tpsa_mean", "tpsa_std", "reason")  # what predict adds to an input's columns


@pytest.fixture(scope="module")
def fuzz_members(trained, tmp_path_factory):
    """(the trained export and an ECFP + SVR export beside it, as one ensemble; their mean for each
    POOL molecule predicted alone)."""
    from sklearn.svm import SVR

    from gtscale.members.fingerprints import ecfp, tanimoto

    from gtscale.members.svr import TanimotoSVR, write_svr_export

    root = tmp_path_factory.mktemp("fuzz")
    table = read_nci_tpsa()
    bits = ecfp(table.smiles[:60])
    svr = TanimotoSVR.from_fitted(SVR(kernel="precomputed", C=10.0).fit(tanimoto(bits, bits), table.targets[:60, 0]), bits, 10.0)
    members = [str(trained[-1]), str(write_svr_export(root / "svr", svr, {"dataset": "nci", "task": {"target_names": ["tpsa"]}}))]
    reference = {}
    for i, smiles in enumerate(POOL):
        pd.DataFrame({"smiles": [smiles]}).to_csv(root / f"{i}.csv", index=False)
        assert main(["predict", *members, "--input", str(root / f"{i}.csv"), "--out", str(root / f"{i}-p.csv"), "--no-progress"]) == 0
        reference[smiles] = pd.read_csv(root / f"{i}-p.csv")["tpsa_mean"][0]
    return members, reference


def predict_in_process(members: list[str], data: bytes, name: str = "in.csv", batch_size: int = 4) -> tuple[int, pd.DataFrame | None, str]:
    """(exit status, the output table or None, stderr) of `gtscale predict` on a file holding `data`."""
    import contextlib
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path, out = Path(folder) / name, Path(folder) / "p.csv"
        path.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["predict", *members, "--input", str(path), "--out", str(out), "--batch-size", str(batch_size), "--no-progress"])
        table = pd.read_csv(out, dtype=str, keep_default_na=False) if out.exists() else None
    return code, table, err.getvalue()


def check_outcome(code: int, table: pd.DataFrame | None, err: str) -> None:
    """Exit 0 with a table whose every row has a prediction or a reason (never both, never neither),
    or exit 2 with one line and no table."""
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("gtscale predict: error: ") and table is None, err
        return
    assert code == 0 and table is not None, (code, err)
    assert ((table["tpsa_mean"] == "") == (table["reason"] != "")).all(), table[["tpsa_mean", "reason"]]


@st.composite
def csv_files(draw) -> tuple[bytes, list[str | None], str]:
    """(a CSV's bytes, the SMILES cell of each of its rows (None: a blank line), its encoding): a
    header with the smiles column among others (now and then hundreds), rows of molecules, odd
    cells, any text, quotes and blank lines, written with \\n or \\r\\n and either quoting rule."""
    names = draw(st.lists(st.text(max_size=8).filter(lambda n: not n.startswith("smiles") and n not in PREDICTED), max_size=3))
    names += [f"wide{i}" for i in range(300)] if draw(st.integers(0, 9)) == 0 else []
    column = draw(st.integers(0, len(names)))
    header = names[:column] + ["smiles"] + names[column:]
    molecule = st.sampled_from(POOL)
    cell = st.one_of(molecule, molecule, molecule, st.sampled_from(ODD_CELLS), st.text(max_size=30),
                     st.text(alphabet="CNOc1()=#[]+-@/\\%23 ", max_size=40))
    rows = draw(st.lists(st.one_of(st.none(), st.lists(cell, min_size=len(header), max_size=len(header))), max_size=10))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
    if end == "\n" and any("\r" in field for field in header + [f for row in rows if row for f in row]):
        quoting = csv.QUOTE_ALL  # QUOTE_MINIMAL would leave it bare, where every reader ends the line
    text = io.StringIO()
    writer = csv.writer(text, lineterminator=end, quoting=quoting)
    writer.writerow(header)
    for row in rows:
        if row is None:
            text.write(end)  # a blank line: an empty molecule, kept as a row
        else:
            writer.writerow(row)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"]))
    return text.getvalue().encode(encoding, errors="replace"), [None if r is None else r[column] for r in rows], encoding


@settings(max_examples=100, deadline=timedelta(seconds=30), derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=csv_files(), batch_size=st.integers(1, 5))
@example(case=(b'smiles,"a\rb"\nCCO,"x\ry"\n\n', ["CCO", None], "utf-8"), batch_size=1)  # a carriage return only quotes keep
def test_fuzzed_csvs_give_a_row_per_input_row_or_one_line(fuzz_members, case, batch_size):
    """Every CSV predict is given ends in exit 0 with one row per input row, in order, each with a
    prediction or a reason (a molecule predicted as it is alone), or in exit 2 with one line."""
    members, reference = fuzz_members
    data, cells, encoding = case
    code, table, err = predict_in_process(members, data, batch_size=batch_size)
    check_outcome(code, table, err)
    if encoding not in ("utf-8", "utf-8-sig"):
        return  # pandas reads the file as UTF-8: either outcome above is right, the rows may differ
    assert code == 0, err  # a well-formed CSV: every row is answered
    assert len(table) == len(cells)
    for row, cell in enumerate(cells):
        if cell in reference:
            assert table["smiles"][row] == cell and table["reason"][row] == "", table.iloc[row]
            np.testing.assert_allclose(float(table["tpsa_mean"][row]), reference[cell], rtol=1e-5, atol=1e-4)
        elif cell is None or not cell.strip():
            assert table["reason"][row] == "empty_smiles"


def packed(name: str, data: bytes) -> bytes:
    """`data` compressed as `name` says (a .zip of one file)."""
    import bz2
    import gzip
    import lzma
    import zipfile

    if name.endswith(".zip"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("in.csv", data)
        return buffer.getvalue()
    return {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}.get(Path(name).suffix, bytes)(data)


@settings(max_examples=60, deadline=timedelta(seconds=30), derandomize=True)
@given(data=st.one_of(st.binary(max_size=3000), st.text(max_size=3000).map(str.encode)),
       name=st.sampled_from(["in.csv", "in.csv.gz", "in.csv.xz", "in.csv.zip", "in.csv.bz2"]), cut=st.integers(0, 40))
def test_random_bytes_give_rows_with_reasons_or_one_line(fuzz_members, data, name, cut):
    """Any bytes after a header line, plain or compressed, whole or cut short by `cut` bytes."""
    whole = packed(name, b"smiles\n" + data)
    check_outcome(*predict_in_process(fuzz_members[0], whole[: len(whole) - cut] if cut else whole, name))


def test_members_are_matched_by_task_not_by_their_targets_names(tmp_path, capsys):
    """An SVR fitted on a CSV whose column is `expt` joins a model fitted on `tpsa`: same task, the
    first member names the columns. A member of another task (a binary one) is refused in one line."""
    from export_fixtures import model_export, molecules_csv, svr_export

    model = model_export(tmp_path / "model")
    svr = svr_export(tmp_path / "svr")
    meta = json.loads((svr / "export.json").read_text())
    meta["shards"]["task"]["target_names"] = ["expt"]
    (svr / "export.json").write_text(json.dumps(meta))
    csv = molecules_csv(tmp_path / "mols.csv")
    assert main(["predict", str(model), str(svr), "--input", str(csv), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    table = pd.read_csv(tmp_path / "p.csv")
    assert {"tpsa_mean", "tpsa_std"} <= set(table.columns) and table["tpsa_mean"].notna().any()
    other = tmp_path / "binary"
    shutil.copytree(model, other)
    meta = json.loads((other / "export.json").read_text())
    meta["task"] = {**meta["task"], "loss": "bce", "metric": "rocauc", "evaluator": "ogbg-molhiv", "target_shift": 0.0, "target_scale": 1.0}
    (other / "export.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(["predict", str(model), str(other), "--input", str(csv), "--out", str(tmp_path / "q.csv"), "--no-progress"]) == 2
    assert "an ensemble's members predict the same task" in one_error_line(capsys)
