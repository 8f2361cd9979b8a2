"""`gtscale fit` with the members of large sets (`--recipe landmark`, what `--recipe auto` runs
above the exact members' size): one landmark kernel model of every column, chosen on the valid
split, exported for `gtscale predict`, beside ECFP4 + random forest as the baseline; the report
says what ran and what each member cost."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gtscale.cli import main
from gtscale.prep.sources.bundled import read_nci_tpsa

ROWS = 200


@pytest.fixture(scope="module")
def two_columns_csv(tmp_path_factory):
    """200 NCI molecules: TPSA as `tpsa`, and `rings` (the ring count) blank on a quarter of them."""
    from rdkit import Chem
    from rdkit.Chem import rdMolDescriptors

    table = read_nci_tpsa()
    smiles = table.smiles[:ROWS]
    rings = np.array([rdMolDescriptors.CalcNumRings(Chem.MolFromSmiles(s)) for s in smiles], float)
    rings[np.random.default_rng(0).random(ROWS) < 0.25] = np.nan
    path = tmp_path_factory.mktemp("fit-large") / "mols.csv"
    pd.DataFrame({"smiles": smiles, "tpsa": table.targets[:ROWS, 0], "rings": rings}).to_csv(path, index=False)
    return path


def test_the_landmark_recipe_exports_one_model_of_every_column_that_predict_reads_the_same(two_columns_csv, tmp_path):
    out = tmp_path / "run"
    assert main(["fit", str(two_columns_csv), "--target-columns", "tpsa", "rings", "--recipe", "landmark", "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["baseline"] == "forest" and report["forest"]["library"] == "scikit-learn" and report["forest"]["cpu_seconds"] >= 0
    for result in report["targets"].values():
        assert set(result["test"]) == {"forest", "landmark", "chosen"} and result["selection"]["chosen"] == "landmark"
        assert "valid split" in result["selection"]["rule"] and result["members"]["landmark"]["cpu_seconds"] > 0
        assert result["test"]["landmark"] == result["test"]["chosen"]
    assert report["targets"]["tpsa"]["test"]["landmark"]["rmse"] < report["targets"]["tpsa"]["test"]["forest"]["rmse"] * 1.5
    text = (out / "report.md").read_text()
    assert "- recipe landmark: forest + landmark" in text and "| ECFP4 + random forest (baseline) |" in text
    assert (out / "export" / "targets.json").is_file() and (out / "members" / "landmark" / "model.yaml").is_file()

    saved = pd.read_csv(out / "test-predictions.csv")
    saved[["smiles"]].to_csv(tmp_path / "test.csv", index=False)
    assert main(["predict", str(out / "export"), "--input", str(tmp_path / "test.csv"), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    predicted = pd.read_csv(tmp_path / "p.csv")
    for name in ("tpsa", "rings"):
        np.testing.assert_allclose(predicted[f"{name}_pred"], saved[f"{name}_chosen_pred"], rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_a_planned_large_set_fine_tunes_one_seed_without_a_refit_beside_the_landmark_model(two_columns_csv, tmp_path, monkeypatch):
    """What --recipe auto runs on a large set when the budget leaves the transformer room (the plan
    of fit/plan.py, given here for a small file): the landmark model and one fine-tuned seed, its
    best-validation checkpoint shipped as it is, chosen among on the valid split beside the forest."""
    import gtscale.fit as fit_module
    from gtscale.fit import fit
    from gtscale.fit.plan import Plan
    from gtscale.members.load import load_members

    planned = Plan(("forest", "landmark", "finetune"), "forest", ("planned for the test",), {}, finetune_steps=6, finetune_seeds=1,
                   finetune_refit=False)
    monkeypatch.setattr(fit_module, "plan_members", lambda table, recipe, budget: planned)
    steps = ["schedule.warmup_steps=1", "eval.every=3", "checkpoint.every=3", "data.loader.batch_size=16"]
    report = fit([two_columns_csv], tmp_path / "run", target_columns=("tpsa", "rings"), finetune_overrides=tuple(steps), progress=False)
    sweep = json.loads((tmp_path / "run" / "finetune" / "sweep.json").read_text())["rows"][0]
    assert [run["seed"] for run in sweep["runs"]] == [0] and not (tmp_path / "run" / "finetune" / "seed-0-refit").exists()
    for result in report["targets"].values():
        assert set(result["test"]) == {"forest", "landmark", "finetune", "chosen"} and "valid split" in result["selection"]["rule"]
        assert result["members"]["finetune"]["refit"].startswith("none") and set(result["selection"]["candidates"]) == {"landmark", "finetune", "mean"}
    (member,), _ = load_members(tmp_path / "run" / "members" / "finetune")
    assert member.target_names == ["tpsa", "rings"]
