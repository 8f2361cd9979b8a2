"""Seeded random mutations of the exports `gtscale predict` reads (a model's, an ECFP + SVR's, a kernel
SVR's): a value of model.yaml or export.json replaced (by a wrong type, a negative, a huge number,
NaN, infinity, an empty list …) or removed, or an SVR tensor given a NaN or cut short. Every
mutation ends in one of two ways:

- exit 0, with one output row per input row, in order, each holding finite predictions or a
  reason (never a blank prediction without one); where the mutated key does not enter the
  function (a record such as run_dir, a dropout rate in eval mode) the predictions are the
  untampered export's;
- exit 2, with one line on stderr naming the export, and no output file.

Never a traceback. The export's own checks (models/export.py, the SVR readers) name the file and
key; a value of export.json's `task` that only predict's TaskConfig types (its loss, metric …)
is refused there, in one line that names the file and the key."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from export_fixtures import SMILES, UNREADABLE, kernel_export, model_export, molecules_csv, save_tensors, svr_export
from gtscale.cli import main

pytestmark = pytest.mark.slow

SEED, MUTATIONS = 0, 48
DELETE = "<delete>"
VALUES = [-8, -1, 0, 1, 3, 10**9, 0.5, -0.5, 1e308, math.nan, math.inf, -math.inf, "x", "", None, True, [], [-1], [math.nan], [1, 2],
          {}, {"a": 1}, DELETE]
#: Keys a trained model does not compute with at prediction time: where a mutation of one is
#: accepted, the predictions must be the untampered export's.
NEUTRAL = {"run_dir", "tag", "source", "format", "overrides", "parameters", "tensors_sha256", "shards.dataset", "shards.transform.shard_size",
           "shards.transform.drop_duplicates", "shards.transform.graph_features", "shards.task.target_stats", "task.metric",
           "task.evaluator", "task.head", "task.features_baseline", "task.anomaly_weight", "task.aux_distance", "node_dropout",
           "edge_dropout", "attention_dropout", "attn_maskout", "activation_checkpointing", "C", "head.dropout", "backbone.node_dropout"}
#: export.json task keys (also under `backbone.`) that TaskRecord (models/export.py) leaves to
#: predict's TaskConfig.

def leaves(data, prefix: str = "") -> list[str]:
    """Dotted keys of every value that is not a mapping (a list is one value)."""
    if not isinstance(data, dict) or not data:
        return [prefix[:-1]] if prefix else []
    return [key for name, value in data.items() for key in leaves(value, f"{prefix}{name}.")]


def mutated(data: dict, dotted: str, value) -> dict:
    data = json.loads(json.dumps(data))
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value == DELETE:
        del node[last]
    else:
        node[last] = value
    return data


def read(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) if path.suffix == ".yaml" else json.loads(path.read_text())


def write(path: Path, data: dict) -> None:
    path.write_text(yaml.safe_dump(data) if path.suffix == ".yaml" else json.dumps(data))


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    model = model_export(root / "model")
    return {"model": model, "svr": svr_export(root / "svr"), "kernel": kernel_export(root / "kernel", model)}


def predict(export: Path, csv: Path, out: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["predict", str(export), "--input", str(csv), "--out", str(out), "--no-progress"])
    return code, capsys.readouterr().err


def mutations(exports: dict[str, Path]) -> list[tuple[str, str, str, object]]:
    """(kind, file, dotted key or tensor name, value) drawn with SEED: file model.pt mutates a tensor."""
    rng = random.Random(SEED)
    fields = [(kind, file, key) for kind, folder in sorted(exports.items()) for file in ("model.yaml", "export.json")
              for key in leaves(read(folder / file))]
    tensors = [(kind, "model.pt", name) for kind in ("svr", "kernel")
               for name in torch.load(exports[kind] / "model.pt", weights_only=True) if not name.startswith("backbone.")]
    drawn = [(*rng.choice(fields), rng.choice(VALUES)) for _ in range(MUTATIONS - 8)]
    return drawn + [(*rng.choice(tensors), rng.choice(["nan", "inf", "cut"])) for _ in range(8)]


def tamper(source: Path, folder: Path, file: str, key: str, value) -> None:
    shutil.copytree(source, folder)
    if file != "model.pt":
        write(folder / file, mutated(read(folder / file), key, value))
        return
    state = torch.load(folder / "model.pt", weights_only=True)
    tensor = state[key].clone()
    if value == "cut":
        tensor = tensor[: max(tensor.shape[0] - 1, 0)]
    elif tensor.is_floating_point():
        tensor.view(-1)[0] = math.nan if value == "nan" else math.inf
    else:
        tensor = tensor[:, :1] if tensor.ndim == 2 else tensor[:0]  # bits cannot be NaN: a shape that fits nothing
    state[key] = tensor
    save_tensors(folder, state)


def predictions(table: pd.DataFrame) -> np.ndarray:
    return table.drop(columns=["smiles", "reason"]).to_numpy(np.float64)


def test_every_mutation_predicts_every_row_or_is_one_line(exports, tmp_path, capsys):
    csv = molecules_csv(tmp_path / "mols.csv")
    baseline = {}
    for kind, folder in exports.items():
        assert predict(folder, csv, tmp_path / f"{kind}.csv", capsys)[0] == 0
        baseline[kind] = predictions(pd.read_csv(tmp_path / f"{kind}.csv", keep_default_na=False).replace("", np.nan))
    outcomes = []
    for i, (kind, file, key, value) in enumerate(mutations(exports)):
        folder, out = tmp_path / f"m{i}", tmp_path / f"m{i}.csv"
        tamper(exports[kind], folder, file, key, value)
        what = f"{kind} {file} {key}={value!r}"
        code, err = predict(folder, csv, out, capsys)
        lines = [line for line in err.splitlines() if line.strip() and "SMILES Parse Error" not in line]
        outcomes.append(code)
        if code == 2:
            assert len(lines) == 1 and not out.exists(), (what, err)
            assert str(folder) in lines[0], (what, lines[0])
            continue
        assert code == 0, (what, code, err)
        table = pd.read_csv(out, keep_default_na=False)
        assert table["smiles"].tolist() == [*SMILES, *UNREADABLE], what
        values = predictions(table.replace("", np.nan))
        reasons = table["reason"].astype(str)
        assert ((reasons != "") | np.isfinite(values).all(axis=1)).all(), (what, table)  # no blank row without a reason
        assert (reasons[len(SMILES):] != "").all(), what
        if key in NEUTRAL and file != "model.pt":
            np.testing.assert_allclose(values, baseline[kind], rtol=1e-6, err_msg=what)
    assert 0 < outcomes.count(2) < len(outcomes)  # the draw reaches both ends
