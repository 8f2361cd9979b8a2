"""Model configs on disk from before every model named its width node_width (Graphormer and MNA-GT
called it hidden_dim, ET width) build the same models: exports, run records and training configs
are read through models.config.current_field_names. The shipped moses-egt export predicts what it
predicted before the rename."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from export_fixtures import shards_record
from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.models import load_model_config
from gtscale.models.config import current_field_names
from gtscale.models.export import build_exported, read_export, write_export
from gtscale.models.pretrained import export_path
from gtscale.config import to_dict
from gtscale.train.config import DataConfig, TrainConfig, resolve_model_config
from gtscale.train.resolve import read_resolved
from model_fixtures import TINY_GRAPHORMER, TINY_MNAGT

#: What each model's width was called before (spelled out: the names as older files hold them).
OLD_WIDTH = {"graphormer": "hidden_dim", "mnagt": "hidden_dim", "et": "width"}
TINY_DENSE_ET = {"name": "et", "form": "dense", "node_width": 16, "num_heads": 2, "head_dim": 8, "num_memories": 24, "num_steps": 2, "lap_k": 0}

#: Three molecules of docs/tutorial/new-molecules.csv.
SMILES = ["Cn1cc(c(Oc2ccc(cc2C#N)S(=O)(=O)Nc3ncns3)n1)c4ccc(Cl)cc4",
          "OCCn1nc(Cc2ccc(Cl)cc2)cc1Oc3ccc(cc3C#N)S(=O)(=O)Nc4ncns4",
          "O=S(=O)(Nc1occn1)c2ccc(Oc3ccccc3c4ccccc4)c(c2)C#N"]
#: `gtscale predict gtscale/pretrained/moses-egt` of SMILES before node_width was every model's
#: name (its 10 descriptor targets, in the export's order).
MOSES_EGT_BEFORE = [
    [3.4232266, 0.30742416, 2.32323, 1.7321728, 1.2043849, -0.029423418, 2.5917163, 0.5370142, 3.1672893, -1.5054426],
    [3.7689438, -0.55330664, 2.9463823, 1.9302433, 0.80534965, 1.0268397, 2.87416, 1.7776953, 3.388044, -1.0369067],
    [2.7331903, 1.6951684, 1.6624299, 2.1317358, 1.4787222, -0.10088064, 1.3637264, 0.8049319, 1.0220721, -1.9254081],
]


def _predict(export: Path, tmp_path: Path, name: str) -> np.ndarray:
    source = tmp_path / "mols.csv"
    pd.DataFrame({"smiles": SMILES}).to_csv(source, index=False)
    out = tmp_path / f"{name}.csv"
    assert main(["predict", str(export), "--input", str(source), "--out", str(out), "--no-progress"]) == 0
    table = pd.read_csv(out)
    return table[[c for c in table.columns if c.endswith("_pred")]].to_numpy(np.float64)


def test_the_shipped_moses_egt_export_predicts_as_before(tmp_path):
    export = export_path("moses-egt")
    assert read_export(export).config["node_width"] == 128
    predicted = _predict(export, tmp_path, "moses")
    # The third molecule's two phenyl rings make eigenvalues of its structural encodings repeat, and
    # LAPACK picks the basis of a repeated eigenvalue by the CPU's instruction set: its predictions
    # move by ~1e-3 between machines, while the first two molecules' do not.
    np.testing.assert_allclose(predicted[:2], np.array(MOSES_EGT_BEFORE)[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predicted[2], np.array(MOSES_EGT_BEFORE)[2], rtol=1e-2, atol=1e-2)


def _with_old_width(folder: Path, out: Path) -> Path:
    """A copy of the export `folder` whose model.yaml names the width as before, in its place."""
    out.mkdir()
    for name in ("model.pt", "export.json"):
        (out / name).write_bytes((folder / name).read_bytes())
    config = yaml.safe_load((folder / "model.yaml").read_text())
    old = {(OLD_WIDTH[config["name"]] if key == "node_width" else key): value for key, value in config.items()}
    (out / "model.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    return out


@pytest.mark.parametrize("model", [TINY_GRAPHORMER, TINY_MNAGT, TINY_DENSE_ET], ids=lambda m: m["name"])
def test_an_export_naming_the_width_as_before_predicts_the_same(model, tmp_path):
    cfg = {**load_model_config(f"{model['name']}-graph" if model["name"] == "et" else f"{model['name']}-small"), **model,
           "head": {"kind": "graph", "num_outputs": 1, "hidden": [8]}}
    torch.manual_seed(0)
    task = {"loss": "mse", "metric": "rmse", "evaluator": "regression", "head": {"hidden": [8]}, "target_shift": [0.0], "target_scale": [1.0]}
    record = shards_record()
    record["transform"] |= {"lap_k": 0, "svd_rank": 0}
    current = write_export(tmp_path / "current", build_exported(cfg).state_dict(), cfg, {"run_dir": "r", "tag": "t", "task": task, "shards": record})
    old = _with_old_width(current, tmp_path / "old")
    assert OLD_WIDTH[model["name"]] in yaml.safe_load((old / "model.yaml").read_text())  # the premise
    assert read_export(old).config == read_export(current).config
    assert list(read_export(old).config) == list(read_export(current).config)  # the field keeps its place
    np.testing.assert_array_equal(_predict(old, tmp_path, "old"), _predict(current, tmp_path, "current"))


def test_training_configs_and_overrides_with_the_old_names_resolve_to_the_current_ones(tmp_path):
    data = DataConfig(shards="shards")
    by_name = resolve_model_config(TrainConfig(data, model="graphormer-slim", model_overrides={"hidden_dim": 32}))
    assert by_name["node_width"] == 32 and "hidden_dim" not in by_name
    inline = resolve_model_config(TrainConfig(data, model={"name": "et", "width": 24}, model_overrides={"width": 48}))
    assert inline == {"name": "et", "node_width": 48}
    run = tmp_path / "run"
    run.mkdir()
    record = to_dict(TrainConfig(data, model="mnagt-small")) | {"model_resolved": {"name": "mnagt", "hidden_dim": 64}, "num_targets": 1}
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    assert read_resolved(run).model == {"name": "mnagt", "node_width": 64}
    path = tmp_path / "mnagt-old.yaml"
    path.write_text("name: mnagt\nhidden_dim: 96\nnum_heads: 4\n")
    assert load_model_config(path) == {"name": "mnagt", "node_width": 96, "num_heads": 4}
    egt = current_field_names({"name": "egt", "node_width": 8, "width": 3}, "cfg")  # not an old name of EGT's: left for EGT to refuse
    assert egt == {"name": "egt", "node_width": 8, "width": 3}


def test_both_names_at_once_are_refused_naming_the_file():
    with pytest.raises(UserError, match="model.yaml: hidden_dim and node_width are both set; hidden_dim is the former name of node_width"):
        current_field_names({"name": "graphormer", "hidden_dim": 8, "node_width": 8}, "model.yaml")


def test_egt_reads_its_authors_name_of_the_attention_dropout():
    """EGT's attention dropout is attention_dropout, as every model's; its authors' attn_dropout is
    read as that, in training configs, overrides and exports alike."""
    by_name = resolve_model_config(TrainConfig(DataConfig(shards="shards"), model="egt-small", model_overrides={"attn_dropout": 0.2}))
    assert by_name["attention_dropout"] == 0.2 and "attn_dropout" not in by_name
    shipped = read_export(export_path("moses-egt")).config  # its model.yaml keeps the authors' name
    assert shipped["attention_dropout"] == 0.1 and "attn_dropout" not in shipped
    with pytest.raises(UserError, match="model.yaml: attn_dropout and attention_dropout are both set"):
        current_field_names({"name": "egt", "attn_dropout": 0.1, "attention_dropout": 0.1}, "model.yaml")
