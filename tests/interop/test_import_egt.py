"""`gtscale import-checkpoint --format egt`: egt_pytorch state dicts.

A checkpoint in the authors' layout is written from a gtscale model's weights; imported, it gives
the original outputs exactly, and it gives the outputs of `authors_egt`, a transcription of the
authors' forward (egt_molgraph.py, egt_layers.py) that reads their tensors in their layouts, per
molecule (the authors' virtual nodes also attend to padding, so molecules are compared unpadded).
The hand-checked cases pin each layout convention on a small example."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gtscale.cli import main
from gtscale.interop.egt import import_egt, out_columns, qkv_rows, svd_columns
from helpers import load_export, outputs, randomised
from model_fixtures import SVD_RANK, make_batch, random_graph

TINY = {
    "name": "egt", "num_layers": 3, "node_width": 16, "edge_width": 8, "num_heads": 4,
    "num_virtual_nodes": 2, "upto_hop": 4, "svd_rank": SVD_RANK, "node_ffn_multiplier": 2.0, "edge_ffn_multiplier": 1.5,
    "node_vocab": [128] * 9, "edge_vocab": [8] * 3,
    "head": {"kind": "graph", "num_outputs": 2, "hidden": [16, 8], "activation": "elu"},
}
SIMPLE = {**TINY, "simple": True}


def authors_state(module, cfg: dict) -> dict:
    """The authors' state dict of `module`'s weights (their names, shapes and layouts)."""
    sd = module.state_dict()
    width, heads = cfg["node_width"], cfg["num_heads"]
    d, r = width // heads, cfg["svd_rank"]
    out = {
        "nodef_embed.weight": sd["backbone.node_embed.table.weight"],
        "featm_embed.weight": sd["backbone.edge_embed.table.weight"],
        "dist_embed.weight": sd["backbone.hop_embed.weight"],
        "svd_embed.bias": sd["backbone.svd_embed.bias"],
        "vn_layer.vn_node_embeddings": sd["backbone.virtual_nodes.node"],
        "vn_layer.vn_edge_embeddings": sd["backbone.virtual_nodes.edge"],
        "final_ln_h.weight": sd["backbone.final_ln_h.weight"],
        "final_ln_h.bias": sd["backbone.final_ln_h.bias"],
    }
    svd = torch.empty(width, 2 * r)
    for i in range(r):  # theirs: u_0 v_0 u_1 v_1 …; ours: u_0 … u_{r-1} v_0 … v_{r-1}
        svd[:, 2 * i] = sd["backbone.svd_embed.weight"][:, i]
        svd[:, 2 * i + 1] = sd["backbone.svd_embed.weight"][:, r + i]
    out["svd_embed.weight"] = svd
    for i in range(cfg["num_layers"]):
        ours, theirs = f"backbone.layers.{i}.", f"EGT_layers.{i}."
        qkv_w, qkv_b = torch.empty(3 * width, width), torch.empty(3 * width)
        o_w = torch.empty(width, width)
        for p in range(3):
            for h in range(heads):
                for j in range(d):
                    qkv_w[(p * d + j) * heads + h] = sd[ours + "qkv.weight"][p * width + h * d + j]
                    qkv_b[(p * d + j) * heads + h] = sd[ours + "qkv.bias"][p * width + h * d + j]
                    if p == 0:
                        o_w[:, j * heads + h] = sd[ours + "out_h.weight"][:, h * d + j]
        out[theirs + "lin_QKV.weight"], out[theirs + "lin_QKV.bias"] = qkv_w, qkv_b
        out[theirs + "lin_O_h.weight"], out[theirs + "lin_O_h.bias"] = o_w, sd[ours + "out_h.bias"]
        for part in ("weight", "bias"):
            e, g = sd[ours + f"edge_in.{part}"].split(heads)
            out[theirs + f"lin_E.{part}"], out[theirs + f"lin_G.{part}"] = e, g
            names = {"mha_ln_h": "ln_h", "mha_ln_e": "ln_e", "ffn_ln_h": "ffn_h.ln", "lin_W_h_1": "ffn_h.fc1", "lin_W_h_2": "ffn_h.fc2",
                     "lin_O_e": "out_e", "ffn_ln_e": "ffn_e.ln", "lin_W_e_1": "ffn_e.fc1", "lin_W_e_2": "ffn_e.fc2"}
            for t, o in names.items():
                if ours + f"{o}.{part}" in sd:
                    out[theirs + f"{t}.{part}"] = sd[ours + f"{o}.{part}"]
    for i in range(len(cfg["head"]["hidden"]) + 1):
        out[f"mlp_layers.{i}.weight"] = sd[f"head.mlp.layers.{i}.weight"]
        out[f"mlp_layers.{i}.bias"] = sd[f"head.mlp.layers.{i}.bias"]
    return {k: v.clone() for k, v in out.items()}


def _ln(x, sd, name):
    return F.layer_norm(x, x.shape[-1:], sd[name + ".weight"], sd[name + ".bias"])


def _lin(x, sd, name):
    return F.linear(x, sd[name + ".weight"], sd[name + ".bias"])


def authors_egt(sd: dict, cfg: dict, batch) -> torch.Tensor:
    """The authors' EGT_PCQM4MV2 forward on a batch of one unpadded molecule, on their tensors."""
    heads, vn, r = cfg["num_heads"], cfg["num_virtual_nodes"], cfg["svd_rank"]
    dot = cfg["node_width"] // heads
    nodef = batch.node_feat + 128 * torch.arange(9)  # their rows: value + 1 + 128·column
    featm = torch.where(batch.edge_feat > 0, batch.edge_feat + 8 * torch.arange(3), 0)
    svd = torch.stack([batch.svd_pe[..., :r], batch.svd_pe[..., r:2 * r]], dim=-1).flatten(-2)  # u_i, v_i interleaved
    h = sd["nodef_embed.weight"][nodef].sum(2) + _lin(svd, sd, "svd_embed")
    e = sd["dist_embed.weight"][batch.spd.clamp(max=cfg["upto_hop"] + 1)] + sd["featm_embed.weight"][featm].sum(3)
    # virtual nodes: rows ẽ_i towards the graph, columns ẽ_j, ½(ẽ_i + ẽ_j) between them
    vn_h, vn_e = sd["vn_layer.vn_node_embeddings"], sd["vn_layer.vn_edge_embeddings"]
    b, n = h.shape[:2]
    h = torch.cat([vn_h.expand(b, -1, -1), h], 1)
    e = torch.cat([vn_e[None, :, None].expand(b, -1, n, -1), e], 1)
    box = 0.5 * (vn_e[:, None] + vn_e[None, :])
    col = torch.cat([box[None].expand(b, -1, -1, -1), vn_e[None, None].expand(b, n, -1, -1)], 1)
    e = torch.cat([col, e], 2)
    for i in range(cfg["num_layers"]):
        p = f"EGT_layers.{i}."
        h_ln, e_ln = _ln(h, sd, p + "mha_ln_h"), _ln(e, sd, p + "mha_ln_e")
        qkv = _lin(h_ln, sd, p + "lin_QKV")
        E, G = _lin(e_ln, sd, p + "lin_E"), _lin(e_ln, sd, p + "lin_G")
        q, k, v = qkv.view(b, qkv.shape[1], -1, heads).split(dot, dim=2)
        h_hat = (torch.einsum("bldh,bmdh->blmh", q, k) * dot ** -0.5).clamp(-5, 5) + E
        gates = torch.sigmoid(G)
        attn = torch.softmax(h_hat, dim=2) * gates
        v_att = torch.einsum("blmh,bmkh->blkh", attn, v)
        scaler = torch.log(1 + gates.sum(dim=2, keepdim=True))
        scaler[:, :vn] = 1.0
        v_att = (v_att * scaler).reshape(b, -1, heads * dot)
        h = _lin(v_att, sd, p + "lin_O_h") + h
        h = _lin(F.elu(_lin(_ln(h, sd, p + "ffn_ln_h"), sd, p + "lin_W_h_1")), sd, p + "lin_W_h_2") + h
        if p + "lin_O_e.weight" in sd:
            e = _lin(h_hat, sd, p + "lin_O_e") + e
            e = _lin(F.elu(_lin(_ln(e, sd, p + "ffn_ln_e"), sd, p + "lin_W_e_1")), sd, p + "lin_W_e_2") + e
    x = _ln(h, sd, "final_ln_h")[:, :vn].reshape(b, -1)
    x = _lin(x, sd, "mlp_layers.0")
    for i in range(1, len(cfg["head"]["hidden"]) + 1):
        x = _lin(F.elu(x), sd, f"mlp_layers.{i}")
    return x


@pytest.mark.parametrize("cfg", [TINY, SIMPLE], ids=["egt", "egt-simple"])
def test_authors_state_dict_imports_to_identical_outputs(cfg, batch, tmp_path):
    original = randomised(cfg)
    torch.save(authors_state(original, cfg), tmp_path / "egt.pt")
    assert main(["import-checkpoint", "--format", "egt", str(tmp_path / "egt.pt"), str(tmp_path / "out")]) == 0
    imported = load_export(tmp_path / "out")
    assert imported.backbone.cfg.simple == cfg.get("simple", False)
    for got, want in zip(outputs(imported, batch), outputs(original, batch)):
        assert torch.equal(got, want)


def test_imported_model_computes_the_authors_function(tmp_path):
    state = authors_state(randomised(TINY, seed=3), TINY)
    torch.save({"model_state": {f"module.{k}": v for k, v in state.items()}}, tmp_path / "wrapped.pt")
    assert main(["import-checkpoint", "--format", "egt", str(tmp_path / "wrapped.pt"), str(tmp_path / "out")]) == 0
    imported = load_export(tmp_path / "out")
    rng = np.random.default_rng(7)
    for size, parts in [(7, 1), (9, 2), (1, 1), (12, 1)]:
        single = make_batch([random_graph(rng, size, components=parts)])
        with torch.no_grad():
            ours = imported.head(imported.backbone(single))
            theirs = authors_egt(state, TINY, single)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_qkv_rows_and_output_columns_are_heads_fastest_in_the_authors_layout():
    # width 4, 2 heads, head_dim 2. Authors: QKV.view(b, l, 6, 2).split(2, dim=2), so output row
    # 5 = 2·2 + 1 is view row 2 (K, channel 0), head 1. Ours: row 4 + 1·2 + 0 = 6 is K, head 1, channel 0.
    rows = qkv_rows(4, 2)
    assert rows[6] == 5 and rows[0] == 0 and rows[2] == 1 and rows[1] == 2
    # V_att.reshape(b, l, dot·H) from [b, l, dot, H]: column j·H + h; ours h·dot + j
    cols = out_columns(4, 2)
    assert cols.tolist() == [0, 2, 1, 3]
    # svd: theirs u0 v0 u1 v1, ours u0 u1 v0 v1
    assert svd_columns(2).tolist() == [0, 2, 1, 3]


def test_imported_tensors_land_where_the_convention_says():
    state = authors_state(randomised(TINY), TINY)
    converted, cfg = import_egt(state, "test")
    assert cfg["head"]["hidden"] == [16, 8] and cfg["node_ffn_multiplier"] == 2.0 and cfg["edge_ffn_multiplier"] == 1.5
    ours = converted["backbone.layers.0.qkv.weight"]
    theirs = state["EGT_layers.0.lin_QKV.weight"]
    # width 16, 4 heads, head_dim 4: our row 16 + 3·4 + 1 (K, head 3, channel 1) = their (4 + 1)·4 + 3
    assert torch.equal(ours[29], theirs[23])
    assert torch.equal(converted["backbone.layers.1.out_h.weight"][:, 3 * 4 + 1], state["EGT_layers.1.lin_O_h.weight"][:, 1 * 4 + 3])
    assert torch.equal(converted["backbone.layers.0.edge_in.weight"][:4], state["EGT_layers.0.lin_E.weight"])
    assert torch.equal(converted["backbone.layers.0.edge_in.weight"][4:], state["EGT_layers.0.lin_G.weight"])
    assert torch.equal(converted["backbone.svd_embed.weight"][:, SVD_RANK], state["svd_embed.weight"][:, 1])  # v_0
    assert "backbone.layers.2.out_e.weight" not in converted  # no edge update in the last layer


def test_unknown_and_missing_keys_are_listed(tmp_path, capsys):
    state = authors_state(randomised(TINY), TINY)
    state["EGT_layers.2.lin_O_e.weight"] = torch.zeros(8, 4)  # the last layer has no edge update
    del state["EGT_layers.1.ffn_ln_e.bias"]
    torch.save(state, tmp_path / "egt.pt")
    assert main(["import-checkpoint", "--format", "egt", str(tmp_path / "egt.pt"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown keys EGT_layers.2.lin_O_e.weight" in err and "missing keys EGT_layers.1.ffn_ln_e.bias" in err


def test_imported_model_yaml_is_a_model_config_other_commands_read(tmp_path, capsys):
    torch.save(authors_state(randomised(TINY), TINY), tmp_path / "egt.pt")
    assert main(["import-checkpoint", "--format", "egt", str(tmp_path / "egt.pt"), str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["model-info", str(tmp_path / "out" / "model.yaml")]) == 0
    assert "egt" in capsys.readouterr().out.lower()
