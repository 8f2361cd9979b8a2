"""microsoft/Graphormer (fairseq) checkpoints → gtscale's Graphormer.

The checkpoint is fairseq's: the weights under ["model"], the options under ["args"] (an argparse
Namespace, read as inert data) in fairseq ≤ 0.10, or, in the hydra-based fairseq that Graphormer
pins, `"args": None` and the options under ["cfg"]["model"] (the same Namespace, or a dict).
Options that change the function (activation_fn, edge_type, the hop count) must be ones gtscale
computes; any other value is an error naming the option, never a silent default. Keys
`encoder.graph_encoder.*` hold the encoder, `encoder.*` the output head. Conventions converted
here (graphormer/data/wrapper.py, collator.py, modules/graphormer_layers.py):

- atoms: convert_to_single_emb adds 1 + 512·c and the collator 1 more, so raw value v of column c
  reads row v + 2 + 512c of `atom_encoder`; gtscale reads row v + 1 + 512c (embeddings.py) with
  node_vocab [512]·9, so gtscale row r = authors' row r + 1. The 512 is the data pipeline's, fixed
  whatever the option num_atoms sized the table to: a table of another size is copied as far as
  both reach (rows the authors' table lacks stay zero in gtscale's: their code cannot read them);
- bonds: one more +1 in preprocess_item, row v + 3 + 512c of `edge_encoder`; gtscale row r =
  authors' row r + 2, with edge_vocab [512]·3 whatever num_edges says;
- degree tables: both codes read row degree + 1, so they are copied as they are;
- spatial table: both read row hops + 1, and the authors' Floyd–Warshall gives an unreachable pair
  510 hops, row 511, whatever num_spatial sized the table to: gtscale's table has AUTHORS_SPATIAL_ROWS
  rows (its last row serves unreachable pairs), copied as far as both reach;
- spatial_pos_max (a task option in the hydra layout): the authors' collator keeps pairs that far
  apart from attending; gtscale's Graphormer has the same option, set from it when it masks
  anything (below 511), and left off at the default 1024;
- `edge_dis_encoder` is a flat [D·H·H, 1] embedding viewed as D matrices [H, H] that right-multiply
  the per-head edge embedding: gtscale's hop_weight [D, H, H] is that view;
- q_proj / k_proj / v_proj (heads contiguous, head_dim each) are gtscale's qkv stacked;
- layout: `emb_layer_norm` present ⇔ embedding_ln; `final_layer_norm` of the encoder is created
  only with --pre-layernorm, and the code never applies it, so its presence means Pre-LN layers
  and the tensor is dropped; otherwise Post-LN layers. The graph output is the graph token without
  a final LayerNorm in both.
- head: LayerNorm(GELU(lm_head_transform_weight(x))) → embed_out (no bias) + lm_output_learned_bias
  is heads.GraphormerOutput; `masked_lm_pooler` is built but unused by the authors and dropped.
"""

from __future__ import annotations

import torch

from gtscale.errors import UserError
from gtscale.interop.mapping import KeyMap, shape_of
from gtscale.interop.unpickle import opaque_fields
from gtscale.models.graphormer import UNREACHABLE_HOPS

ENC = "encoder.graph_encoder."
NUM_ATOM_COLUMNS, NUM_BOND_COLUMNS = 9, 3
#: gtscale row r of the atom / bond table = the authors' row r + this (see the module docstring).
ATOM_ROW_SHIFT, BOND_ROW_SHIFT = 1, 2
#: The per-column offset of the authors' data pipeline (wrapper.py convert_to_single_emb).
AUTHORS_COLUMN_OFFSET = 512
#: Rows of the spatial table the authors' data reaches: hops + 1 up to an unreachable pair's 510 + 1.
AUTHORS_SPATIAL_ROWS = UNREACHABLE_HOPS + 2
#: Table options → (the table whose rows they count, rows = option + this).
TABLE_OPTIONS = {"num_atoms": (ENC + "graph_node_feature.atom_encoder.weight", 1),
                 "num_edges": (ENC + "graph_attn_bias.edge_encoder.weight", 1),
                 "num_spatial": (ENC + "graph_attn_bias.spatial_pos_encoder.weight", 0)}
#: Options the weights do not determine: fairseq argument name → gtscale field, graphormer_base's value.
OPTIONS = {"multi_hop_max_dist": ("multi_hop_max_dist", 5), "dropout": ("dropout", 0.0),
           "attention_dropout": ("attention_dropout", 0.1), "act_dropout": ("activation_dropout", 0.1)}
#: Options with the one value gtscale's Graphormer computes (absent: the authors' default, the same).
FIXED = {"activation_fn": "gelu", "edge_type": "multi_hop"}


def shifted_table(table: torch.Tensor, offset: int, rows: int) -> torch.Tensor:
    """A gtscale table of `rows` rows: row r = authors' row r + offset for r ≥ 1, as far as the
    authors' table reaches. Row 0 stays the zero padding row; rows beyond the authors' table
    (values their code cannot read) are zero."""
    out = table.new_zeros((rows, *table.shape[1:]))
    copied = max(0, min(rows, table.shape[0] - offset) - 1)
    out[1:1 + copied] = table[1 + offset:1 + offset + copied]
    return out


def fairseq_options(checkpoint: dict, where: str) -> dict:
    """The training options: ["args"] when set (fairseq itself prefers it), else ["cfg"]["model"],
    with spatial_pos_max from ["cfg"]["task"] when the model options lack it (a task option of the
    hydra-based Graphormer)."""
    if checkpoint.get("args") is not None:
        return _fields(checkpoint["args"], "args", where)
    cfg = checkpoint.get("cfg")
    if cfg is None:
        return {}
    if not isinstance(cfg, dict) or cfg.get("model") is None:
        raise UserError(f"{where}: 'cfg' holds no 'model' options that gtscale can read (a {_kind(cfg)})")
    options = _fields(cfg["model"], "cfg.model", where)
    task = _fields(cfg["task"], "cfg.task", where) if cfg.get("task") is not None else {}
    return ({"spatial_pos_max": task["spatial_pos_max"]} if "spatial_pos_max" in task else {}) | options


def _fields(obj, key: str, where: str) -> dict:
    fields = obj if isinstance(obj, dict) else opaque_fields(obj)
    if not fields and obj:
        raise UserError(f"{where}: {key} is a {_kind(obj)}; gtscale reads options from an argparse Namespace or a dict")
    return fields


def _kind(obj) -> str:
    return getattr(obj, "qualname", type(obj).__name__)


def fairseq_state(checkpoint, where: str) -> tuple[dict, dict]:
    """(weights, options) of a fairseq checkpoint; a bare state dict is accepted with no options."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        return checkpoint["model"], fairseq_options(checkpoint, where)
    if isinstance(checkpoint, dict) and any(isinstance(k, str) and k.startswith(ENC) for k in checkpoint):
        return checkpoint, {}
    raise UserError(f"{where}: not a fairseq Graphormer checkpoint (no 'model' entry with {ENC}* weights)")


def model_options(options: dict, where: str) -> dict:
    """gtscale fields of the options the weights do not determine; refuses what it cannot honour."""
    for option, value in FIXED.items():
        if options.get(option, value) != value:
            raise UserError(f"{where}: {option} {options[option]!r}; gtscale's Graphormer computes only {option}={value!r}")
    fields = {}
    for option, (field, default) in OPTIONS.items():
        value = options.get(option, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (option == "multi_hop_max_dist" and not isinstance(value, int)):
            raise UserError(f"{where}: option {option}={value!r} is not a number gtscale can use")
        fields[field] = value
    masked = options.get("spatial_pos_max")
    if masked is not None and (not isinstance(masked, int) or isinstance(masked, bool) or masked < 0):
        raise UserError(f"{where}: option spatial_pos_max={masked!r} is not a hop count gtscale can use")
    fields["spatial_pos_max"] = masked if masked is not None and masked <= UNREACHABLE_HOPS else None  # beyond: masks nothing
    return fields


def check_table_options(state: dict, options: dict, where: str) -> None:
    """num_atoms, num_edges and num_spatial, where recorded, are the sizes of their tables."""
    for option, (key, extra) in TABLE_OPTIONS.items():
        if option in options and options[option] != shape_of(state, key, where)[0] - extra:
            raise UserError(f"{where}: option {option}={options[option]!r}, but {key} has {shape_of(state, key, where)[0]} rows")


def model_config(state: dict, options: dict, where: str) -> dict:
    fields = model_options(options, where)
    check_table_options(state, options, where)
    width = shape_of(state, ENC + "graph_node_feature.atom_encoder.weight", where)[1]
    heads = shape_of(state, ENC + "graph_attn_bias.spatial_pos_encoder.weight", where)[1]
    shape_of(state, ENC + "graph_attn_bias.edge_encoder.weight", where)
    layers = 0
    while ENC + f"layers.{layers}.fc1.weight" in state:
        layers += 1
    if layers == 0:
        raise UserError(f"{where}: missing key {ENC}layers.0.fc1.weight")
    cfg = {
        "name": "graphormer",
        "num_layers": layers,
        "node_width": width,  # the authors' encoder_embed_dim
        "ffn_dim": shape_of(state, ENC + "layers.0.fc1.weight", where)[0],
        "num_heads": heads,
        "num_in_degree": shape_of(state, ENC + "graph_node_feature.in_degree_encoder.weight", where)[0],
        "num_out_degree": shape_of(state, ENC + "graph_node_feature.out_degree_encoder.weight", where)[0],
        "num_spatial": AUTHORS_SPATIAL_ROWS,
        "num_edge_dis": shape_of(state, ENC + "graph_attn_bias.edge_dis_encoder.weight", where)[0] // (heads * heads),
        "node_vocab": [AUTHORS_COLUMN_OFFSET] * NUM_ATOM_COLUMNS,
        "edge_vocab": [AUTHORS_COLUMN_OFFSET] * NUM_BOND_COLUMNS,
        "post_ln": ENC + "final_layer_norm.weight" not in state,
        "embedding_ln": ENC + "emb_layer_norm.weight" in state,
        "final_ln": False,
        **fields,
    }
    num_outputs = shape_of(state, "encoder.embed_out.weight", where)[0]
    cfg["head"] = {"kind": "graph", "num_outputs": num_outputs, "form": "graphormer", "activation": "gelu"}
    return cfg


def convert(state: dict, cfg: dict, where: str, head: bool = True) -> dict:
    """gtscale state dict (backbone.*, and head.* unless `head` is false: the encoder
    `encoder.graph_encoder.*` alone) of the fairseq weights."""
    keys = KeyMap(state, where)
    heads = cfg["num_heads"]
    node, bias = ENC + "graph_node_feature.", ENC + "graph_attn_bias."
    atom_rows, bond_rows = 1 + sum(cfg["node_vocab"]), 1 + sum(cfg["edge_vocab"])
    keys.put("backbone.atom_embed.table.weight", node + "atom_encoder.weight", lambda t: shifted_table(t, ATOM_ROW_SHIFT, atom_rows))
    keys.put("backbone.in_degree.weight", node + "in_degree_encoder.weight")
    keys.put("backbone.out_degree.weight", node + "out_degree_encoder.weight")
    keys.put("backbone.graph_token", node + "graph_token.weight")
    keys.put("backbone.spatial.weight", bias + "spatial_pos_encoder.weight", lambda t: shifted_table(t, 0, cfg["num_spatial"]))
    keys.put("backbone.path_encoding.edges.table.weight", bias + "edge_encoder.weight", lambda t: shifted_table(t, BOND_ROW_SHIFT, bond_rows))
    keys.put("backbone.path_encoding.hop_weight", bias + "edge_dis_encoder.weight", lambda t: t.reshape(-1, heads, heads))
    keys.put("backbone.virtual_distance", bias + "graph_token_virtual_distance.weight")
    if cfg["embedding_ln"]:
        _layer_norm(keys, "backbone.embedding_ln", ENC + "emb_layer_norm")
    keys.drop(ENC + "final_layer_norm.weight")  # built with --pre-layernorm, never applied
    keys.drop(ENC + "final_layer_norm.bias")
    for i in range(cfg["num_layers"]):
        src, dst = ENC + f"layers.{i}.", f"backbone.layers.{i}."
        for part in ("weight", "bias"):
            qkv = [src + f"self_attn.{p}_proj.{part}" for p in "qkv"]
            keys.put(dst + f"qkv.{part}", qkv, lambda *t: torch.cat(t))
            keys.put(dst + f"out.{part}", src + f"self_attn.out_proj.{part}")
            keys.put(dst + f"ffn.fc1.{part}", src + f"fc1.{part}")
            keys.put(dst + f"ffn.fc2.{part}", src + f"fc2.{part}")
        _layer_norm(keys, dst + "ln", src + "self_attn_layer_norm")
        _layer_norm(keys, dst + "ffn.ln", src + "final_layer_norm")
    if head:
        _convert_head(keys)
    return keys.finish()


def _convert_head(keys: KeyMap) -> None:
    keys.put("head.mlp.transform.weight", "encoder.lm_head_transform_weight.weight")
    keys.put("head.mlp.transform.bias", "encoder.lm_head_transform_weight.bias")
    _layer_norm(keys, "head.mlp.norm", "encoder.layer_norm")
    keys.put("head.mlp.out.weight", "encoder.embed_out.weight")
    keys.put("head.mlp.bias", "encoder.lm_output_learned_bias")
    keys.drop("encoder.masked_lm_pooler.weight")  # built by GraphormerEncoder, used nowhere
    keys.drop("encoder.masked_lm_pooler.bias")


def _layer_norm(keys: KeyMap, dst: str, src: str) -> None:
    keys.put(dst + ".weight", src + ".weight")
    keys.put(dst + ".bias", src + ".bias")


def import_graphormer(checkpoint, where: str) -> tuple[dict, dict]:
    """(gtscale state dict, model config with head) of a fairseq Graphormer checkpoint."""
    state, options = fairseq_state(checkpoint, where)
    cfg = model_config(state, options, where)
    return convert(state, cfg, where), cfg
