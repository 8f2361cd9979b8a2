"""`gtscale import-checkpoint --format graphormer`: fairseq checkpoints of microsoft/Graphormer.

The round trip writes a checkpoint the way fairseq's code lays it out (key names, shapes, row
offsets, the flat edge-distance table, an argparse Namespace under "args") from a gtscale model's
weights; the hand-checked cases pin each convention with numbers worked out from the authors'
wrapper.py / collator.py / graphormer_layers.py."""

from __future__ import annotations

import argparse

import pytest
import torch

from gtscale.cli import main
from gtscale.errors import UserError
from gtscale.format.schema import FEATURE_SHIFT, SPD_UNREACHABLE
from gtscale.interop.graphormer import import_graphormer
from helpers import load_export, outputs, randomised

ENC = "encoder.graph_encoder."
#: Small, with the tables of the authors' data geometry: 512 rows per feature column (their
#: convert_to_single_emb offset), 512 spatial rows (an unreachable pair reads row 511).
TINY = {
    "name": "graphormer", "num_layers": 2, "node_width": 16, "ffn_dim": 24, "num_heads": 4,
    "num_in_degree": 6, "num_out_degree": 6, "num_spatial": 512, "num_edge_dis": 6, "multi_hop_max_dist": 3,
    "node_vocab": [512] * 9, "edge_vocab": [512] * 3, "dropout": 0.0, "attention_dropout": 0.1, "activation_dropout": 0.1,
}
RELEASED = {**TINY, "post_ln": True, "embedding_ln": True, "final_ln": False,
            "head": {"kind": "graph", "num_outputs": 3, "form": "graphormer", "activation": "gelu"}}
PRE_LN = {**RELEASED, "post_ln": False}


def fairseq_checkpoint(module, cfg: dict, layout: str = "args", **options) -> dict:
    """A fairseq checkpoint of `module`'s weights, in the authors' layout and conventions; `options`
    replace the saved training options. layout "args": fairseq ≤ 0.10 (an argparse Namespace under
    "args"); "cfg": the hydra-based fairseq Graphormer pins ("args": None, the Namespace under
    cfg["model"], as convert_namespace_to_omegaconf leaves a legacy model's options); "cfg-dict":
    cfg["model"] a plain dict (a dataclass-configured model after OmegaConf.to_container)."""
    sd = {k: v.clone() for k, v in module.state_dict().items()}
    d = cfg["node_width"]
    gen = torch.Generator().manual_seed(1)
    out = {}
    # atoms: their row v + 2 + V·c is our row v + 1 + V·c; their row 1 (no value) is never read
    atoms = sd["backbone.atom_embed.table.weight"]
    theirs = torch.randn(atoms.shape, generator=gen)
    theirs[0] = 0
    theirs[2:] = atoms[1:-1]
    out[ENC + "graph_node_feature.atom_encoder.weight"] = theirs
    bonds = sd["backbone.path_encoding.edges.table.weight"]
    theirs = torch.randn(bonds.shape, generator=gen)
    theirs[0] = 0
    theirs[3:] = bonds[1:-2]
    out[ENC + "graph_attn_bias.edge_encoder.weight"] = theirs
    out[ENC + "graph_node_feature.in_degree_encoder.weight"] = sd["backbone.in_degree.weight"]
    out[ENC + "graph_node_feature.out_degree_encoder.weight"] = sd["backbone.out_degree.weight"]
    out[ENC + "graph_node_feature.graph_token.weight"] = sd["backbone.graph_token"]
    out[ENC + "graph_attn_bias.spatial_pos_encoder.weight"] = sd["backbone.spatial.weight"]
    out[ENC + "graph_attn_bias.graph_token_virtual_distance.weight"] = sd["backbone.virtual_distance"]
    out[ENC + "graph_attn_bias.edge_dis_encoder.weight"] = sd["backbone.path_encoding.hop_weight"].reshape(-1, 1)
    out[ENC + "emb_layer_norm.weight"] = sd["backbone.embedding_ln.weight"]
    out[ENC + "emb_layer_norm.bias"] = sd["backbone.embedding_ln.bias"]
    if not cfg["post_ln"]:  # built by --pre-layernorm and never applied by the authors' forward
        out[ENC + "final_layer_norm.weight"] = torch.randn(d, generator=gen)
        out[ENC + "final_layer_norm.bias"] = torch.randn(d, generator=gen)
    for i in range(cfg["num_layers"]):
        ours, theirs = f"backbone.layers.{i}.", ENC + f"layers.{i}."
        for part in ("weight", "bias"):
            q, k, v = sd[ours + f"qkv.{part}"].split(d)
            out[theirs + f"self_attn.q_proj.{part}"] = q
            out[theirs + f"self_attn.k_proj.{part}"] = k
            out[theirs + f"self_attn.v_proj.{part}"] = v
            out[theirs + f"self_attn.out_proj.{part}"] = sd[ours + f"out.{part}"]
            out[theirs + f"self_attn_layer_norm.{part}"] = sd[ours + f"ln.{part}"]
            out[theirs + f"final_layer_norm.{part}"] = sd[ours + f"ffn.ln.{part}"]
            out[theirs + f"fc1.{part}"] = sd[ours + f"ffn.fc1.{part}"]
            out[theirs + f"fc2.{part}"] = sd[ours + f"ffn.fc2.{part}"]
    out["encoder.masked_lm_pooler.weight"] = torch.randn(d, d, generator=gen)
    out["encoder.masked_lm_pooler.bias"] = torch.randn(d, generator=gen)
    out["encoder.lm_head_transform_weight.weight"] = sd["head.mlp.transform.weight"]
    out["encoder.lm_head_transform_weight.bias"] = sd["head.mlp.transform.bias"]
    out["encoder.layer_norm.weight"] = sd["head.mlp.norm.weight"]
    out["encoder.layer_norm.bias"] = sd["head.mlp.norm.bias"]
    out["encoder.embed_out.weight"] = sd["head.mlp.out.weight"]
    out["encoder.lm_output_learned_bias"] = sd["head.mlp.bias"]
    args = argparse.Namespace(**{"multi_hop_max_dist": cfg["multi_hop_max_dist"], "dropout": 0.0, "attention_dropout": 0.1,
                                 "act_dropout": 0.1, "activation_fn": "gelu", "pre_layernorm": not cfg["post_ln"],
                                 "arch": "graphormer_base", "edge_type": "multi_hop", **options})
    rest = {"model": out, "optimizer_history": [{"num_updates": 7}], "extra_state": {"epoch": 2}}
    if layout == "args":
        return {"args": args, **rest}
    model_options = vars(args) | {"_name": args.arch} if layout == "cfg-dict" else args
    return {"args": None, "cfg": {"common": {"seed": 1}, "model": model_options, "task": argparse.Namespace(**vars(args))}, **rest}


@pytest.mark.parametrize("cfg", [RELEASED, PRE_LN], ids=["post-ln-released", "pre-ln"])
def test_fairseq_checkpoint_imports_to_identical_outputs(cfg, batch, tmp_path):
    original = randomised(cfg)
    torch.save(fairseq_checkpoint(original, cfg), tmp_path / "checkpoint_best.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "checkpoint_best.pt"), str(tmp_path / "out")]) == 0
    imported = load_export(tmp_path / "out")
    assert imported.backbone.cfg.post_ln == cfg["post_ln"] and imported.backbone.cfg.multi_hop_max_dist == 3
    for got, want in zip(outputs(imported, batch), outputs(original, batch)):
        assert torch.equal(got, want)


def test_imported_export_is_accepted_by_init_from(batch, tmp_path):
    from gtscale.train.task_model import GraphTaskModel, load_backbone

    original = randomised(RELEASED)
    torch.save(fairseq_checkpoint(original, RELEASED), tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 0
    fresh = randomised(RELEASED, seed=5)
    model = GraphTaskModel(fresh.backbone, fresh.head)
    assert load_backbone(model, str(tmp_path / "out" / "model.pt")) == len(original.backbone.state_dict())
    # the last table rows no value reaches are not in the authors' tables; everything else is
    with torch.no_grad():
        assert torch.equal(model.backbone(batch).graph, original.backbone(batch).graph)


def _small_pcqm_checkpoint() -> tuple[dict, dict]:
    """The released vocabularies (512 per column) at width 8, 2 heads."""
    cfg = {**RELEASED, "node_width": 8, "ffn_dim": 8, "num_heads": 2, "node_vocab": [512] * 9,
           "edge_vocab": [512] * 3, "num_spatial": 512, "num_in_degree": 512, "num_out_degree": 512, "num_edge_dis": 4}
    ckpt = fairseq_checkpoint(randomised(cfg), cfg)
    return ckpt, cfg


def test_atom_and_bond_rows_follow_convert_to_single_emb_and_the_collator():
    ckpt, _ = _small_pcqm_checkpoint()
    model = ckpt["model"]
    model[ENC + "graph_node_feature.atom_encoder.weight"][:, 0] = torch.arange(9 * 512 + 1).float()
    model[ENC + "graph_attn_bias.edge_encoder.weight"][:, 0] = torch.arange(3 * 512 + 1).float()
    state, _ = import_graphormer(ckpt, "test")
    atoms, bonds = state["backbone.atom_embed.table.weight"], state["backbone.path_encoding.edges.table.weight"]
    from gtscale.models.embeddings import FeatureEmbedding

    # raw atom value 5 in column 0 → their row 5 + 1 (convert_to_single_emb) + 1 (pad_2d_unsqueeze) = 7;
    # raw 0 in column 1 → 0 + 1 + 512 + 1 = 514
    atom_feat = torch.tensor([[5, 0, 0, 0, 0, 0, 0, 0, 0]]) + FEATURE_SHIFT
    rows = FeatureEmbedding([512] * 9, 1).rows(atom_feat)[0]
    assert atoms[rows[0], 0] == 7 and atoms[rows[1], 0] == 514
    # raw bond value 2 in column 2 → 2 + 1 + 1024 (convert) + 1 (preprocess_item) + 1 (pad_3d_unsqueeze) = 1029
    bond_rows = FeatureEmbedding([512] * 3, 1).rows(torch.tensor([[0, 0, 2]]) + FEATURE_SHIFT)[0]
    assert bonds[bond_rows[2], 0] == 1029
    assert atoms[0].abs().sum() == 0 and bonds[0].abs().sum() == 0  # padding rows stay zero


def test_spatial_rows_are_hops_plus_one_and_unreachable_is_510_plus_one(batch):
    ckpt, cfg = _small_pcqm_checkpoint()
    model = ckpt["model"]
    model[ENC + "graph_attn_bias.spatial_pos_encoder.weight"][:] = torch.arange(512).float()[:, None]
    model[ENC + "graph_attn_bias.edge_encoder.weight"][:] = 0  # no edge term in the bias
    state, new_cfg = import_graphormer(ckpt, "test")
    from gtscale.models.export import check_fits

    imported = check_fits(state, new_cfg, "test").backbone
    bias = imported.attention_bias(batch, torch.float32)[:, 0, 1:, 1:]
    # the authors' spatial_pos is the Floyd–Warshall distance + 1 (pad_spatial_pos_unsqueeze),
    # unreachable pairs 510 + 1
    assert (bias[batch.spd == 1] == 2).all() and (bias[batch.spd == 3] == 4).all()
    real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
    assert (bias[real & (batch.spd == SPD_UNREACHABLE)] == 511).all()


def test_edge_dis_encoder_is_a_flat_view_of_hop_matrices():
    ckpt, _ = _small_pcqm_checkpoint()
    flat = ckpt["model"][ENC + "graph_attn_bias.edge_dis_encoder.weight"]
    flat[:] = 0
    flat[5] = 1.0  # H = 2: reshape(-1, 2, 2)[1][0][1] is element 1·4 + 0·2 + 1 = 5
    state, _ = import_graphormer(ckpt, "test")
    assert torch.equal(state["backbone.path_encoding.hop_weight"][1], torch.tensor([[0.0, 1.0], [0.0, 0.0]]))
    assert state["backbone.path_encoding.hop_weight"].abs().sum() == 1


def test_layout_follows_the_checkpoint_keys():
    ckpt, _ = _small_pcqm_checkpoint()
    _, cfg = import_graphormer(ckpt, "test")
    assert (cfg["post_ln"], cfg["embedding_ln"], cfg["final_ln"]) == (True, True, False)
    ckpt["model"][ENC + "final_layer_norm.weight"] = torch.ones(8)
    ckpt["model"][ENC + "final_layer_norm.bias"] = torch.zeros(8)
    _, cfg = import_graphormer(ckpt, "test")
    assert cfg["post_ln"] is False and cfg["final_ln"] is False


def test_unknown_and_missing_keys_are_listed(tmp_path, capsys):
    ckpt, _ = _small_pcqm_checkpoint()
    ckpt["model"]["encoder.graph_encoder.layers.0.extra.weight"] = torch.zeros(2)
    del ckpt["model"]["encoder.graph_encoder.layers.1.fc2.bias"]
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown keys encoder.graph_encoder.layers.0.extra.weight" in err
    assert "missing keys encoder.graph_encoder.layers.1.fc2.bias" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_set_overrides_options_the_weights_do_not_carry(tmp_path, capsys):
    torch.save(fairseq_checkpoint(randomised(RELEASED), RELEASED), tmp_path / "ckpt.pt")
    base = ["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]
    assert main(base + ["--set", "dropout=0.2", "--set", "head.activation=gelu"]) == 0
    assert load_export(tmp_path / "out").backbone.cfg.dropout == 0.2
    assert main(base + ["--set", "no_such_option=1"]) == 2
    assert "--set no_such_option" in capsys.readouterr().err


def fairseq_graphormer(sd: dict, cfg: dict, batch, spatial_pos_max: int = 1024) -> torch.Tensor:
    """A transcription of the authors' forward (graphormer_layers.py, graphormer_graph_encoder*.py,
    models/graphormer.py; Post-LN, eval) on one unpadded molecule, reading their tensors with their
    input conventions: atom rows raw + 2 + 512c, path-edge rows raw + 3 + 512c, spatial_pos = hops + 1
    (unreachable 510 + 1), degree + 1; their collator's attn_bias: -inf between nodes
    `spatial_pos_max` hops apart or more (before the + 1)."""
    import torch.nn.functional as F

    def lin(x, name, bias=True):
        return F.linear(x, sd[name + ".weight"], sd[name + ".bias"] if bias else None)

    def ln(x, name):
        return F.layer_norm(x, x.shape[-1:], sd[name + ".weight"], sd[name + ".bias"])

    heads, dist, v = cfg["num_heads"], cfg["multi_hop_max_dist"], 512  # convert_to_single_emb's offset, whatever num_atoms is
    x_rows = batch.node_feat + 1 + v * torch.arange(9)  # node_feat holds raw + 1
    edge_input = torch.where(batch.path_edges > 0, batch.path_edges + 2 + v * torch.arange(3), 0)
    spatial_pos = torch.where(batch.spd == SPD_UNREACHABLE, 510, batch.spd) + 1
    node, bias_p = ENC + "graph_node_feature.", ENC + "graph_attn_bias."
    x = (sd[node + "atom_encoder.weight"][x_rows].sum(-2) + sd[node + "in_degree_encoder.weight"][batch.in_degree + 1]
         + sd[node + "out_degree_encoder.weight"][batch.out_degree + 1])
    b, n = x.shape[:2]
    x = torch.cat([sd[node + "graph_token.weight"][None].expand(b, 1, -1), x], 1)
    bias = torch.zeros(b, heads, n + 1, n + 1)
    bias[:, :, 1:, 1:] = torch.where((spatial_pos - 1 >= spatial_pos_max)[:, None], float("-inf"), 0.0)
    bias[:, :, 1:, 1:] += sd[bias_p + "spatial_pos_encoder.weight"][spatial_pos].permute(0, 3, 1, 2)
    t = sd[bias_p + "graph_token_virtual_distance.weight"].view(1, heads, 1)
    bias[:, :, 1:, 0] += t
    bias[:, :, 0, :] += t
    sp = spatial_pos.clone()
    sp[sp == 0] = 1
    sp = torch.where(sp > 1, sp - 1, sp).clamp(0, dist)
    e = sd[bias_p + "edge_encoder.weight"][edge_input[:, :, :, :dist]].mean(-2)  # [b, n, n, D, H]
    w = sd[bias_p + "edge_dis_encoder.weight"].reshape(-1, heads, heads)[:e.shape[3]]
    e = torch.einsum("bijdh,dhk->bijdk", e, w).sum(-2) / sp.float().unsqueeze(-1)
    bias[:, :, 1:, 1:] += e.permute(0, 3, 1, 2)
    x = ln(x, ENC + "emb_layer_norm")
    hd = cfg["node_width"] // heads
    for i in range(cfg["num_layers"]):
        p = ENC + f"layers.{i}."
        q = lin(x, p + "self_attn.q_proj") * hd ** -0.5
        k, val = lin(x, p + "self_attn.k_proj"), lin(x, p + "self_attn.v_proj")
        q, k, val = (t_.view(b, n + 1, heads, hd).transpose(1, 2) for t_ in (q, k, val))
        attn = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1) @ val
        x = ln(x + lin(attn.transpose(1, 2).reshape(b, n + 1, -1), p + "self_attn.out_proj"), p + "self_attn_layer_norm")
        x = ln(x + lin(F.gelu(lin(x, p + "fc1")), p + "fc2"), p + "final_layer_norm")
    x = ln(F.gelu(lin(x, "encoder.lm_head_transform_weight")), "encoder.layer_norm")
    return (F.linear(x, sd["encoder.embed_out.weight"]) + sd["encoder.lm_output_learned_bias"])[:, 0]


def test_imported_model_computes_the_authors_function(tmp_path):
    import numpy as np
    from model_fixtures import make_batch, random_graph

    cfg = {**RELEASED, "node_vocab": [512] * 9, "edge_vocab": [512] * 3, "num_spatial": 512,
           "num_in_degree": 512, "num_out_degree": 512, "num_edge_dis": 8}
    ckpt = fairseq_checkpoint(randomised(cfg, seed=4), cfg)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 0
    imported = load_export(tmp_path / "out")
    rng = np.random.default_rng(11)
    for size, parts in [(7, 1), (9, 2), (1, 1), (12, 1)]:
        single = make_batch([random_graph(rng, size, components=parts)])
        with torch.no_grad():
            ours = imported.head(imported.backbone(single))
            theirs = fairseq_graphormer(ckpt["model"], cfg, single)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


WIDE_HOPS = {**RELEASED, "num_edge_dis": 24}
SAVED = {"multi_hop_max_dist": 20, "attention_dropout": 0.05, "act_dropout": 0.2, "dropout": 0.15}


@pytest.mark.parametrize("layout", ["args", "cfg", "cfg-dict"])
def test_options_are_read_from_either_fairseq_layout(layout, tmp_path):
    """The cfg layout's options were once ignored: exported with 5 / 0.1 / 0.1 without a word."""
    torch.save(fairseq_checkpoint(randomised(WIDE_HOPS), WIDE_HOPS, layout, **SAVED), tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 0
    got = load_export(tmp_path / "out").backbone.cfg
    assert (got.multi_hop_max_dist, got.attention_dropout, got.activation_dropout, got.dropout) == (20, 0.05, 0.2, 0.15)


@pytest.mark.parametrize("layout", ["args", "cfg", "cfg-dict"])
@pytest.mark.parametrize("option,value,fragment", [
    ("activation_fn", "relu", "activation_fn 'relu'"),  # once accepted in the cfg layout
    ("edge_type", "simple", "edge_type 'simple'"),
    ("multi_hop_max_dist", "20", "multi_hop_max_dist='20'"),  # once replaced by 5 without a word
    ("attention_dropout", None, "attention_dropout=None"),
])
def test_an_option_the_export_cannot_honour_is_named(layout, option, value, fragment, tmp_path, capsys):
    torch.save(fairseq_checkpoint(randomised(RELEASED), RELEASED, layout, **{option: value}), tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "ckpt.pt" in lines[0] and fragment in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_unreadable_cfg_options_are_an_error_not_defaults():
    ckpt = fairseq_checkpoint(randomised(RELEASED), RELEASED, "cfg")
    ckpt["cfg"]["model"] = "graphormer_base"
    with pytest.raises(UserError, match="cfg.model is a str"):
        import_graphormer(ckpt, "ckpt.pt")


def _resized(table: torch.Tensor, rows: int, seed: int) -> torch.Tensor:
    """`table` with `rows` rows: cut, or extended by random rows (which the authors' data reaches not)."""
    out = torch.randn((rows, *table.shape[1:]), generator=torch.Generator().manual_seed(seed))
    kept = min(rows, table.shape[0])
    out[:kept] = table[:kept]
    return out


TABLE_OF = {"num_atoms": ("graph_node_feature.atom_encoder.weight", 1), "num_edges": ("graph_attn_bias.edge_encoder.weight", 1),
            "num_spatial": ("graph_attn_bias.spatial_pos_encoder.weight", 0)}


@pytest.mark.parametrize("option,value", [
    ("num_atoms", 9 * 530), ("num_atoms", 9 * 500),  # once read as 530 / 500 rows per column: off by 1.5e-2
    ("num_edges", 3 * 540), ("num_edges", 3 * 500),
    ("num_spatial", 600),  # once: unreachable pairs read row 599, the authors' 511 (bias off by 1.8)
    ("num_spatial", 300),  # the authors' code reads no row past 299 of connected molecules
    ("spatial_pos_max", 3), ("spatial_pos_max", 510),  # once ignored: pairs that far apart attended
    ("spatial_pos_max", 1024),  # the task's default: masks nothing
])
@pytest.mark.parametrize("layout", ["args", "cfg"])
def test_table_sizes_and_spatial_pos_max_compute_the_authors_function(option, value, layout, tmp_path):
    """Newer fairseq checkpoints record the table sizes and the collator's spatial_pos_max among
    their options; the authors' data keeps its own geometry whatever they say (offset 512 per
    column, an unreachable pair 510 hops), and the import keeps it too."""
    import numpy as np
    from model_fixtures import make_batch, random_graph

    cfg = {**RELEASED, "num_edge_dis": 8, "num_in_degree": 64, "num_out_degree": 64}
    ckpt = fairseq_checkpoint(randomised(cfg, seed=7), cfg, layout, **{option: value})
    if option in TABLE_OF:
        key, extra = ENC + TABLE_OF[option][0], TABLE_OF[option][1]
        ckpt["model"][key] = _resized(ckpt["model"][key], value + extra, seed=3)
    if layout == "cfg" and option == "spatial_pos_max":  # the hydra Graphormer's task option
        del ckpt["cfg"]["model"].spatial_pos_max
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 0
    imported = load_export(tmp_path / "out")
    rng = np.random.default_rng(12)
    reaches_unreachable_row = not (option == "num_spatial" and value < 512)  # else the authors' code fails on such pairs
    shapes = [(7, 1), (9, 2), (1, 1), (12, 1), (10, 3)] if reaches_unreachable_row else [(7, 1), (1, 1), (12, 1)]
    masking = value if option == "spatial_pos_max" else 1024
    for size, parts in shapes:
        single = make_batch([random_graph(rng, size, components=parts)])
        with torch.no_grad():
            ours = imported.head(imported.backbone(single))
            theirs = fairseq_graphormer(ckpt["model"], cfg, single, masking)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_a_table_option_that_disagrees_with_its_table_is_named(tmp_path, capsys):
    torch.save(fairseq_checkpoint(randomised(RELEASED), RELEASED, "cfg", num_atoms=9 * 400), tmp_path / "ckpt.pt")
    assert main(["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "ckpt.pt: option num_atoms=3600, but encoder.graph_encoder.graph_node_feature.atom_encoder.weight has 4609 rows" in err
    assert "\n" not in err


@pytest.mark.parametrize("how", ["option", "set"])
def test_hop_count_beyond_the_edge_distance_table_names_the_checkpoint(how, tmp_path, capsys):
    """GraphormerConfig's refusal of multi_hop_max_dist past num_edge_dis (6 here) once came
    without the file it was about."""
    options = {"multi_hop_max_dist": 9} if how == "option" else {}
    torch.save(fairseq_checkpoint(randomised(RELEASED), RELEASED, **options), tmp_path / "ckpt.pt")
    argv = ["import-checkpoint", "--format", "graphormer", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]
    assert main(argv + (["--set", "multi_hop_max_dist=9"] if how == "set" else [])) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{tmp_path / 'ckpt.pt'}: " in lines[0] and "multi_hop_max_dist 9 must be between 1 and num_edge_dis 6" in lines[0]
