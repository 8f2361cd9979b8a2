"""`gtscale fingerprint`: an export's pooled graph representation of each molecule, one row per input
row in order (a SMILES that is not read keeps its row, with its reason), the same vectors the
kernel SVR of `gtscale baseline kernel` reads, from a CSV or a shard folder, written only over a
file fingerprint wrote."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from export_fixtures import SMILES, kernel_export, model_export, svr_export
from gtscale.cli import main
from gtscale.inference import graph_representation
from gtscale.members.load import load_member

#: Readable molecules between crafted unreadable ones: a ring left open, an empty cell, an element
#: that does not exist, a chain beyond the atom cap (refused before RDKit parses it).
ROWS = [SMILES[0], "C1CC", "", SMILES[1], "[Xx]", "C" * 600, SMILES[2], SMILES[3]]
REASONS = ["", "invalid_smiles", "empty_smiles", "", "invalid_smiles", "too_many_nodes", "", ""]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exports")
    backbone = model_export(folder / "backbone")
    return backbone, kernel_export(folder / "kernel", backbone)


@pytest.fixture
def molecules(tmp_path):
    path = tmp_path / "mols.csv"
    pd.DataFrame({"id": [f"0{i}" for i in range(len(ROWS))], "smiles": ROWS}).to_csv(path, index=False)
    return path


def test_each_row_gets_the_kernel_arms_vector_or_its_reason_in_input_order(exports, molecules, tmp_path):
    backbone, kernel = exports
    assert main(["fingerprint", str(backbone), "--input", str(molecules), "--out", str(tmp_path / "z.csv"), "--batch-size", "3",
                 "--no-progress"]) == 0
    table = pd.read_csv(tmp_path / "z.csv", dtype=str, keep_default_na=False)
    assert table["id"].tolist() == [f"0{i}" for i in range(len(ROWS))] and table["smiles"].tolist() == ROWS  # the input, as written
    assert table["reason"].tolist() == REASONS
    columns = [c for c in table.columns if c.startswith("z_")]
    model = load_member(backbone)
    assert columns == [f"z_{k}" for k in range(model.model.backbone.graph_dim)]
    for row, smiles in enumerate(ROWS):  # each row against its molecule alone, through the kernel arm's own function
        values = table.loc[row, columns]
        if REASONS[row]:
            assert (values == "").all()
        else:
            np.testing.assert_allclose(values.astype(float), graph_representation(model, [smiles])[0][0], rtol=1e-5, atol=1e-6)

    # the .npy: float32, NaN rows where not read, read back without pickle; the reasons in its record
    assert main(["fingerprint", str(kernel), "--input", str(molecules), "--out", str(tmp_path / "z.npy"), "--no-progress"]) == 0
    z = np.load(tmp_path / "z.npy", allow_pickle=False)
    assert z.dtype == np.float32 and z.shape == (len(ROWS), len(columns))
    assert np.isnan(z).all(axis=1).tolist() == [bool(why) for why in REASONS]
    np.testing.assert_allclose(z[~np.isnan(z).all(axis=1)], table.loc[[not why for why in REASONS], columns].astype(float), rtol=1e-5, atol=1e-6)
    record = json.loads((tmp_path / "z.npy.json").read_text())
    assert record["rejected"] == [[row, why] for row, why in enumerate(REASONS) if why] and record["rows"] == len(ROWS)


def test_a_shard_folder_gives_each_records_vector_by_split_and_idx(exports, tmp_path):
    backbone = exports[0]
    csv = tmp_path / "set.csv"
    frame = pd.DataFrame({"smiles": SMILES, "y": np.arange(len(SMILES), dtype=float), "split": ["train", "test"] * (len(SMILES) // 2)})
    frame.to_csv(csv, index=False)
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(csv), "--target-columns", "y", "--split-column", "split", "--svd-rank", "4",
                 "--lap-k", "0", "--out", str(shards), "--no-progress"]) == 0
    assert main(["fingerprint", str(backbone), "--input", str(shards), "--splits", "test,train", "--out", str(tmp_path / "z.npy"),
                 "--no-progress"]) == 0
    record = json.loads((tmp_path / "z.npy.json").read_text())
    order = [i for split in ("test", "train") for i in range(len(SMILES)) if frame["split"][i] == split]
    assert record["split"] == [frame["split"][i] for i in order] and record["idx"] == order
    z = np.load(tmp_path / "z.npy", allow_pickle=False)
    expected = graph_representation(load_member(backbone), [SMILES[i] for i in order])[0]
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-5)


def test_only_a_file_fingerprint_wrote_is_replaced(exports, molecules, tmp_path, capsys):
    backbone = exports[0]
    argv = ["fingerprint", str(backbone), "--input", str(molecules), "--no-progress", "--out"]
    foreign = tmp_path / "mine.npy"
    np.save(foreign, np.ones(3))
    mine = foreign.read_bytes()
    assert main([*argv, str(foreign)]) == 2
    assert "would replace a file gtscale did not write" in capsys.readouterr().err and foreign.read_bytes() == mine
    assert not (tmp_path / "mine.npy.json").exists()

    ours = tmp_path / "z.npy"
    assert main([*argv, str(ours)]) == 0 and main([*argv, str(ours)]) == 0  # its own file: replaced
    np.save(ours, np.zeros(2))  # the user's bytes now, whatever the record beside it says
    assert main([*argv, str(ours)]) == 2 and np.load(ours).tolist() == [0.0, 0.0]
    assert main([*argv, str(ours), "--overwrite"]) == 0 and np.load(ours).shape == (len(ROWS), 16)

    (tmp_path / "other.npy.json").write_text('{"notes": "mine"}')  # a record name the user's file holds
    assert main([*argv, str(tmp_path / "other.npy")]) == 2 and (tmp_path / "other.npy.json").read_text() == '{"notes": "mine"}'
    foreign_csv = tmp_path / "mine.csv"
    foreign_csv.write_text("a,b\n1,2\n")
    assert main([*argv, str(foreign_csv)]) == 2 and foreign_csv.read_text() == "a,b\n1,2\n"
    assert main([*argv, str(tmp_path / "z.csv")]) == 0 and main([*argv, str(tmp_path / "z.csv")]) == 0
    assert main([*argv, str(molecules), "--overwrite"]) == 2 and "is the input" in capsys.readouterr().err


def ensemble_of(folder: Path, members: dict[str, Path]) -> Path:
    """An ensemble export as `gtscale fit` writes DIR/export: ensemble.json over copies of `members`."""
    for name, source in members.items():
        shutil.copytree(source, folder / name)
    (folder / "ensemble.json").write_text(json.dumps({"format": "gtscale-ensemble", "members": list(members), "weights": [1.0] * len(members)}))
    return folder


def test_an_ensemble_gives_the_representation_its_members_share_and_a_shipped_name_is_taken(exports, molecules, tmp_path):
    backbone, kernel = exports
    several = ensemble_of(tmp_path / "fit-export", {"ecfp": svr_export(tmp_path / "svr"), "kernel": kernel})
    for name, export in (("backbone", backbone), ("several", several)):
        assert main(["fingerprint", str(export), "--input", str(molecules), "--out", str(tmp_path / f"{name}.npy"), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "several.npy"), np.load(tmp_path / "backbone.npy"))
    assert main(["fingerprint", "moses-egt", "--input", str(molecules), "--out", str(tmp_path / "moses.npy"), "--no-progress"]) == 0
    assert np.load(tmp_path / "moses.npy").shape[0] == len(ROWS)


def test_what_fingerprint_cannot_do_is_one_line(exports, molecules, tmp_path, capsys):
    seeds = ensemble_of(tmp_path / "seeds", {"seed-0": exports[0], "seed-1": model_export(tmp_path / "other", seed=1)})
    cases = [
        ([str(svr_export(tmp_path / "svr")), "--out", str(tmp_path / "z.npy")], "an ECFP + SVR (SVC) export has no graph representation"),
        ([str(seeds), "--out", str(tmp_path / "z.npy")], "its members have different graph representations"),
        ([str(exports[0]), "--out", str(tmp_path / "z.parquet")], "name a .csv or an .npy file"),
        ([str(exports[0]), "--out", str(tmp_path / "z.csv"), "--smiles-column", "smi"], "smi"),
    ]
    capsys.readouterr()
    for argv, message in cases:
        assert main(["fingerprint", *argv, "--input", str(molecules), "--no-progress"]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
    pd.DataFrame({"smiles": SMILES[:2], "z_0": [1, 2]}).to_csv(tmp_path / "taken.csv", index=False)
    assert main(["fingerprint", str(exports[0]), "--input", str(tmp_path / "taken.csv"), "--out", str(tmp_path / "t.csv")]) == 2
    assert "has a column 'z_0', which fingerprint writes" in capsys.readouterr().err
