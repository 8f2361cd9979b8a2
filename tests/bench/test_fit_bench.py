"""`gtscale bench fit`: labelled MOSES molecules the backbone never saw (its test splits), a share
of cells blank, each size fitted by `gtscale fit` in a process of its own and tabulated with its
time, memory and test error; a size already fitted is read back, not fitted again."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gtscale.bench.fit import LABELS, MISSING, labelled_csv
from gtscale.cli import main
from gtscale.prep.sources.moses import read_moses


def test_labels_are_descriptors_of_unseen_molecules_with_a_share_blank_and_classes_thresholded(tmp_path):
    regression = pd.read_csv(labelled_csv(tmp_path, 400, 3, "regression"))
    moses = read_moses(splits_read=("test", "test_scaffolds"))
    unseen = {moses.smiles[i] for split in ("test", "test_scaffolds") for i in moses.splits[split]}
    assert list(regression.columns) == ["smiles", *LABELS[:3]] and set(regression["smiles"]) <= unseen
    blank = regression[list(LABELS[:3])].isna().to_numpy().mean()
    assert abs(blank - MISSING) < 0.06
    classes = pd.read_csv(labelled_csv(tmp_path, 400, 3, "classification"))
    values = classes[list(LABELS[:3])].to_numpy().ravel()
    values = values[np.isfinite(values)]
    assert set(np.unique(values)) == {0.0, 1.0} and 0.1 < values.mean() < 0.35  # a minority of positives


@pytest.mark.slow
def test_each_size_is_fitted_once_and_tabulated(tmp_path):
    out = tmp_path / "bench"
    args = ["bench", "fit", "--out", str(out), "--sizes", "300", "--columns", "2", "--recipe", "landmark", "--json", str(tmp_path / "t.json")]
    assert main(args) == 0
    (row,) = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert row["molecules"] == 300 and row["columns"] == 2 and row["baseline"] == "forest" and row["chosen"] == ["landmark"]
    assert row["cpu_s"] > 0 and row["peak_rss_gib"] > 0 and np.isfinite(row["test"]["chosen"]) and set(row["member_cpu_s"]) == {"landmark", "forest"}
    assert "| 300 | 2 |" in (out / "fit-scaling.md").read_text()
    assert main(args) == 0  # read back: the same measurement, not a second fit
    assert json.loads((tmp_path / "t.json").read_text())["rows"][0]["wall_s"] == row["wall_s"]
