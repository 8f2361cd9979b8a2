"""`gtscale bench model --authors PATH` and the importers run backwards (interop.mapping.invert).

The inversion is tested always: against the hand-written authors' layouts of the import tests
(authors_state, fairseq_checkpoint), and as a round trip gtscale → authors' names → gtscale.
The comparison with the authors' own code runs when a checkout is named by
GTSCALE_AUTHORS_EGT (shamim-hussain/egt_pytorch) or GTSCALE_AUTHORS_GRAPHORMER
(microsoft/Graphormer): gtscale has no network in CI and never ships the authors' code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.interop import egt as egt_interop
from gtscale.interop import graphormer as graphormer_interop
from gtscale.interop.mapping import invert
from helpers import randomised
from model_fixtures import make_batch, random_graph
from test_import_egt import TINY as EGT_TINY
from test_import_egt import authors_state
from test_import_graphormer import PRE_LN, RELEASED, fairseq_checkpoint

ENC = graphormer_interop.ENC
PAPER_LAYOUT = {**PRE_LN, "embedding_ln": False, "final_ln": True, "head": {"kind": "graph", "num_outputs": 2, "activation": "gelu"}}


def _importer_cfg(cfg: dict) -> dict:
    from gtscale.bench.authors import importer_config

    return importer_config(cfg)


def test_inverted_egt_importer_gives_the_hand_written_authors_state():
    module = randomised(EGT_TINY, seed=2)
    theirs = authors_state(module, EGT_TINY)
    ours = module.state_dict()
    back = invert(lambda s: egt_interop.convert(s, _importer_cfg(EGT_TINY), "t"), {k: v.shape for k, v in theirs.items()}, ours)
    assert back.keys() == theirs.keys()
    for key in theirs:
        assert torch.equal(back[key], theirs[key]), key
    again = egt_interop.convert(back, _importer_cfg(EGT_TINY), "t")
    assert all(torch.equal(again[k], ours[k]) for k in ours)


@pytest.mark.parametrize("cfg", [RELEASED, PRE_LN], ids=["post-ln-released", "pre-ln"])
def test_inverted_graphormer_importer_gives_the_fairseq_layout(cfg):
    module = randomised(cfg, seed=3)
    ckpt = fairseq_checkpoint(module, cfg)["model"]
    ours = graphormer_interop.convert(ckpt, _importer_cfg(cfg), "t")
    back = invert(lambda s: graphormer_interop.convert(s, _importer_cfg(cfg), "t"), {k: v.shape for k, v in ckpt.items()}, ours)
    expected = {k: v.clone() for k, v in ckpt.items()}
    # what the importer reads nowhere comes back zero: the atom row no value reaches (1), the
    # bond rows (1, 2), the pooler fairseq builds and never uses, Pre-LN's unapplied final LN
    expected[ENC + "graph_node_feature.atom_encoder.weight"][1] = 0
    expected[ENC + "graph_attn_bias.edge_encoder.weight"][1:3] = 0
    for key in expected:
        if "masked_lm_pooler" in key or key.startswith(ENC + "final_layer_norm"):
            expected[key].zero_()
    for key in expected:
        assert torch.equal(back[key], expected[key]), key


def test_round_trip_through_the_authors_names_keeps_every_weight_they_can_hold():
    module = randomised(RELEASED, seed=4)
    ours = module.state_dict()
    shapes = {k: v.shape for k, v in fairseq_checkpoint(module, RELEASED)["model"].items()}
    convert = lambda s: graphormer_interop.convert(s, _importer_cfg(RELEASED), "t")  # noqa: E731
    again = convert(invert(convert, shapes, ours))
    for key, value in ours.items():
        if key == "backbone.atom_embed.table.weight":  # the last row lies beyond the authors' table
            value = torch.cat([value[:-graphormer_interop.ATOM_ROW_SHIFT], torch.zeros_like(value[:1])])
        elif key == "backbone.path_encoding.edges.table.weight":
            value = torch.cat([value[:-graphormer_interop.BOND_ROW_SHIFT], torch.zeros_like(value[:2])])
        assert torch.equal(again[key], value), key


def test_an_importer_that_reads_one_element_twice_is_not_inverted():
    duplicate = lambda s: {"a": s["x"], "b": s["x"]}  # noqa: E731
    with pytest.raises(ValueError, match="more than one"):
        invert(duplicate, {"x": (3,)}, {"a": torch.ones(3), "b": torch.ones(3)})


def test_a_folder_that_is_not_a_checkout_is_a_one_line_error(tmp_path, capsys):
    code = main(["bench", "model", "--model", "egt-small", "--authors", str(tmp_path), "--steps", "1"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "lib/models" in err and "egt_pytorch" in err and "\n" not in err


# --- against the authors' code (when a checkout is named) ----------------------------------------

def _checkout(variable: str) -> Path:
    path = os.environ.get(variable)
    if not path or not Path(path).is_dir():
        pytest.skip(f"{variable} names no checkout of the authors' code")
    return Path(path)


def _graphs(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [random_graph(rng, 7), random_graph(rng, 9, components=2), random_graph(rng, 1), random_graph(rng, 11)]


def test_authors_egt_computes_gtscale_egt():
    from gtscale.bench.authors import authors_model, check_agreement

    ours = randomised(EGT_TINY, seed=5)
    theirs = authors_model(EGT_TINY, _checkout("GTSCALE_AUTHORS_EGT"), ours)
    singles = [make_batch([g]) for g in _graphs(0)]  # their virtual nodes see padding: unpadded
    found = check_agreement(ours, theirs, singles, EGT_TINY)
    assert found["max_output_diff"] < 1e-5 and found["max_relative_grad_diff"] < 1e-4
    with torch.no_grad():  # the check can fail: one weight off, and it refuses
        theirs.net.EGT_layers[1].lin_QKV.weight[3, 2] += 0.5
    with pytest.raises(UserError, match="another function"):
        check_agreement(ours, theirs, singles, EGT_TINY)


@pytest.mark.parametrize("cfg", [RELEASED, PAPER_LAYOUT], ids=["post-ln-released", "pre-ln-final-ln"])
def test_authors_graphormer_encoder_computes_gtscale_graphormer(cfg):
    from gtscale.bench.authors import authors_model, check_agreement

    ours = randomised(cfg, seed=6)
    theirs = authors_model(cfg, _checkout("GTSCALE_AUTHORS_GRAPHORMER"), ours)
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in ours.parameters())
    padded = make_batch(_graphs(1), pad_to=13)
    found = check_agreement(ours, theirs, [padded], cfg)
    assert found["max_output_diff"] < 1e-5 and found["max_relative_grad_diff"] < 1e-4
    with torch.no_grad():
        theirs.encoder.graph_attn_bias.spatial_pos_encoder.weight[2, 1] += 0.5
    with pytest.raises(UserError, match="another function"):
        check_agreement(ours, theirs, [padded], cfg)


def test_bench_model_authors_prints_both_and_the_ratio(tmp_path, capsys):
    path = _checkout("GTSCALE_AUTHORS_EGT")
    cfg = {**EGT_TINY, "svd_rank": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    args = ["bench", "model", "--model", str(tmp_path / "tiny.yaml"), "--authors", str(path), "--batch-size", "4",
            "--steps", "2", "--warmup", "0", "--threads", "1", "--precision", "fp32", "--json", str(tmp_path / "out.json")]
    assert main(args) == 0
    assert "gtscale/authors" in capsys.readouterr().out
    report = json.loads((tmp_path / "out.json").read_text())
    (row,) = report["results"]
    assert row["gtscale_graphs_per_s"] > 0 and row["authors_graphs_per_s"] > 0
    assert row["ratio"] == pytest.approx(row["gtscale_graphs_per_s"] / row["authors_graphs_per_s"])
    assert report["setup"]["agreement"]["max_output_diff"] < 1e-5
