"""microsoft/Graphormer (fairseq) checkpoints → gtscale's Graphormer.

The checkpoint is fairseq's: the weights under ["model"], the options under ["args"] (an argparse
Namespace, read as inert data) in fairseq ≤ 0.10, or, in the hydra-based fairseq that Graphormer
pins, `"args": None` and the options under ["cfg"]["model"] (the same Namespace, or a dict).
Options that change the function (activation_fn, edge_type, the hop count) must be ones gtscale
computes; any other value is an error naming the option, never a silent default. Keys
`encoder.graph_encoder.*` hold the encoder, `encoder.*` the output head. Conventions converted
here (graphormer/data/wrapper.py, collator.py, modules/graphormer_layers.py):

- atoms: convert_to_single_emb adds 1 + 512·c and the collator 1 more, so raw value v of column c
  reads row v + 2 + 512c of `atom_encoder`; gtscale reads row v + 1 + 512c (embeddings.py), so
  gtscale row r = authors' row r + 1;
- bonds: one more +1 in preprocess_item, row v + 3 + 512c of `edge_encoder`; gtscale row r =
  authors' row r + 2;
- degree and spatial tables: both codes read row value + 1 (unreachable: the last spatial row),
  so those tables are copied as they are;
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

ENC = "encoder.graph_encoder."
NUM_ATOM_COLUMNS, NUM_BOND_COLUMNS = 9, 3
#: gtscale row r of the atom / bond table = the authors' row r + this (see the module docstring).
ATOM_ROW_SHIFT, BOND_ROW_SHIFT = 1, 2
#: Options the weights do not determine: fairseq argument name → gtscale field, graphormer_base's value.
OPTIONS = {"multi_hop_max_dist": ("multi_hop_max_dist", 5), "dropout": ("dropout", 0.0),
           "attention_dropout": ("attention_dropout", 0.1), "act_dropout": ("activation_dropout", 0.1)}
#: Options with the one value gtscale's Graphormer computes (absent: the authors' default, the same).
FIXED = {"activation_fn": "gelu", "edge_type": "multi_hop"}


def shifted_table(table: torch.Tensor, offset: int) -> torch.Tensor:
    """gtscale row r = authors' row r + offset for r ≥ 1. Row 0 stays the zero padding row; the
    last `offset` gtscale rows (values beyond the authors' table, which no data reaches) are zero."""
    out = torch.zeros_like(table)
    out[1:table.shape[0] - offset] = table[1 + offset:]
    return out


def fairseq_options(checkpoint: dict, where: str) -> dict:
    """The training options: ["args"] when set (fairseq itself prefers it), else ["cfg"]["model"]."""
    if checkpoint.get("args") is not None:
        return _fields(checkpoint["args"], "args", where)
    cfg = checkpoint.get("cfg")
    if cfg is None:
        return {}
    if not isinstance(cfg, dict) or cfg.get("model") is None:
        raise UserError(f"{where}: 'cfg' holds no 'model' options that gtscale can read (a {_kind(cfg)})")
    return _fields(cfg["model"], "cfg.model", where)


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


def _per_column(rows: int, columns: int, key: str, where: str) -> list[int]:
    if (rows - 1) % columns:
        raise UserError(f"{where}: {key} has {rows} rows, not 1 + {columns} equal vocabularies")
    return [(rows - 1) // columns] * columns


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
    return fields


def model_config(state: dict, options: dict, where: str) -> dict:
    fields = model_options(options, where)
    atom_rows, width = shape_of(state, ENC + "graph_node_feature.atom_encoder.weight", where)
    heads = shape_of(state, ENC + "graph_attn_bias.spatial_pos_encoder.weight", where)[1]
    edge_rows = shape_of(state, ENC + "graph_attn_bias.edge_encoder.weight", where)[0]
    layers = 0
    while ENC + f"layers.{layers}.fc1.weight" in state:
        layers += 1
    if layers == 0:
        raise UserError(f"{where}: missing key {ENC}layers.0.fc1.weight")
    cfg = {
        "name": "graphormer",
        "num_layers": layers,
        "hidden_dim": width,
        "ffn_dim": shape_of(state, ENC + "layers.0.fc1.weight", where)[0],
        "num_heads": heads,
        "num_in_degree": shape_of(state, ENC + "graph_node_feature.in_degree_encoder.weight", where)[0],
        "num_out_degree": shape_of(state, ENC + "graph_node_feature.out_degree_encoder.weight", where)[0],
        "num_spatial": shape_of(state, ENC + "graph_attn_bias.spatial_pos_encoder.weight", where)[0],
        "num_edge_dis": shape_of(state, ENC + "graph_attn_bias.edge_dis_encoder.weight", where)[0] // (heads * heads),
        "node_vocab": _per_column(atom_rows, NUM_ATOM_COLUMNS, "atom_encoder", where),
        "edge_vocab": _per_column(edge_rows, NUM_BOND_COLUMNS, "edge_encoder", where),
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
    keys.put("backbone.atom_embed.table.weight", node + "atom_encoder.weight", lambda t: shifted_table(t, ATOM_ROW_SHIFT))
    keys.put("backbone.in_degree.weight", node + "in_degree_encoder.weight")
    keys.put("backbone.out_degree.weight", node + "out_degree_encoder.weight")
    keys.put("backbone.graph_token", node + "graph_token.weight")
    keys.put("backbone.spatial.weight", bias + "spatial_pos_encoder.weight")
    keys.put("backbone.path_encoding.edges.table.weight", bias + "edge_encoder.weight", lambda t: shifted_table(t, BOND_ROW_SHIFT))
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
