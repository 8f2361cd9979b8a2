"""shamim-hussain/egt_pytorch checkpoints (EGT_MOL / EGT_PCQM4MV2 state dicts) → gtscale's EGT.

Key names and conventions (lib/models/egt_layers.py, egt.py, egt_molgraph.py):

- embeddings: `nodef_embed` (128 rows per atom column + padding), `featm_embed` (8 per bond
  column), `dist_embed` (hops 0..k and k+1) read the same rows as gtscale's tables: copied as is;
- SVD encodings: the authors stack (u_i, v_i) per component, so `svd_embed`'s input columns run
  u₀ v₀ u₁ v₁ …; gtscale's run u₀…u_{r-1} v₀…v_{r-1}: a column permutation;
- `lin_QKV` outputs are viewed as [3·d, heads]: row (p·d + j)·H + h is part p (Q, K, V), head h,
  channel j, heads fastest; gtscale's qkv rows are p·d_h + h·d + j, heads slowest: a row
  permutation, and `lin_O_h`'s input columns (j·H + h) the matching column permutation;
- `lin_E` (E) and `lin_G` (gates) are gtscale's one `edge_in`, E's rows first;
- layers: every layer but the last updates edges (`lin_O_e`, `ffn_ln_e`, `lin_W_e_*`); none do
  in EGT-Simple; `final_ln_h`, `vn_layer.*` (virtual nodes) and `mlp_layers.*` (the head) map
  one to one.

The options the weights do not carry take the authors' PCQM4Mv2 values (activation elu,
scale_degree true, clip_logits [-5, 5]); `--set` overrides them.
"""

from __future__ import annotations

import torch

from gtscale.errors import UserError
from gtscale.interop.mapping import KeyMap, shape_of

NUM_ATOM_COLUMNS, NUM_BOND_COLUMNS = 9, 3
_WRAPPERS = ("model_state", "state_dict", "model")


def egt_state(checkpoint, where: str) -> dict:
    """The state dict, unwrapped from a {'model_state': …}-style dict and DataParallel's 'module.'."""
    if isinstance(checkpoint, dict) and "nodef_embed.weight" not in checkpoint and "module.nodef_embed.weight" not in checkpoint:
        for name in _WRAPPERS:
            if isinstance(checkpoint.get(name), dict):
                checkpoint = checkpoint[name]
                break
    if not isinstance(checkpoint, dict):
        raise UserError(f"{where}: not an egt_pytorch state dict")
    if all(isinstance(k, str) and k.startswith("module.") for k in checkpoint):
        checkpoint = {k.removeprefix("module."): v for k, v in checkpoint.items()}
    if "nodef_embed.weight" not in checkpoint:
        raise UserError(f"{where}: not an egt_pytorch state dict (no nodef_embed.weight)")
    return checkpoint


def _per_column(rows: int, columns: int, key: str, where: str) -> list[int]:
    if (rows - 1) % columns:
        raise UserError(f"{where}: {key} has {rows} rows, not 1 + {columns} equal vocabularies")
    return [(rows - 1) // columns] * columns


def model_config(state: dict, where: str) -> dict:
    node_rows, width = shape_of(state, "nodef_embed.weight", where)
    hop_rows, edge_width = shape_of(state, "dist_embed.weight", where)
    heads = shape_of(state, "EGT_layers.0.lin_E.weight", where)[0]
    layers = 0
    while f"EGT_layers.{layers}.lin_E.weight" in state:
        layers += 1
    edge_layer = next((i for i in range(layers) if f"EGT_layers.{i}.lin_W_e_1.weight" in state), None)
    mlp = []
    while f"mlp_layers.{len(mlp)}.weight" in state:
        mlp.append(state[f"mlp_layers.{len(mlp)}.weight"].shape[0])
    if not mlp:
        raise UserError(f"{where}: missing key mlp_layers.0.weight")
    svd = state.get("svd_embed.weight")
    virtual = state.get("vn_layer.vn_node_embeddings")
    return {
        "name": "egt",
        "num_layers": layers,
        "node_width": width,
        "edge_width": edge_width,
        "num_heads": heads,
        "node_ffn_multiplier": shape_of(state, "EGT_layers.0.lin_W_h_1.weight", where)[0] / width,
        "edge_ffn_multiplier": state[f"EGT_layers.{edge_layer}.lin_W_e_1.weight"].shape[0] / edge_width if edge_layer is not None else 1.0,
        "activation": "elu",
        "clip_logits": [-5.0, 5.0],
        "scale_degree": True,
        "gated": True,
        "simple": edge_layer is None and layers > 1,
        "output_edges": False,
        "num_virtual_nodes": int(virtual.shape[0]) if virtual is not None else 0,
        "upto_hop": hop_rows - 2,
        "svd_rank": int(svd.shape[1]) // 2 if svd is not None else 0,
        "node_vocab": _per_column(node_rows, NUM_ATOM_COLUMNS, "nodef_embed", where),
        "edge_vocab": _per_column(shape_of(state, "featm_embed.weight", where)[0], NUM_BOND_COLUMNS, "featm_embed", where),
        "head": {"kind": "graph", "num_outputs": mlp[-1], "hidden": mlp[:-1], "activation": "elu"},
    }


def qkv_rows(width: int, heads: int) -> torch.Tensor:
    """rows[g] = the authors' lin_QKV row holding gtscale's qkv row g = p·width + h·d + j."""
    d = width // heads
    p, h, j = torch.meshgrid(torch.arange(3), torch.arange(heads), torch.arange(d), indexing="ij")
    return ((p * d + j) * heads + h).flatten()


def out_columns(width: int, heads: int) -> torch.Tensor:
    """cols[g] = the authors' lin_O_h input column holding gtscale's out_h column g = h·d + j."""
    d = width // heads
    h, j = torch.meshgrid(torch.arange(heads), torch.arange(d), indexing="ij")
    return (j * heads + h).flatten()


def svd_columns(rank: int) -> torch.Tensor:
    """cols[g] = the authors' svd_embed input column of gtscale's column g (u₀…u_{r-1} v₀…v_{r-1})."""
    return torch.cat([torch.arange(rank) * 2, torch.arange(rank) * 2 + 1])


def convert(state: dict, cfg: dict, where: str) -> dict:
    keys = KeyMap(state, where)
    width, heads = cfg["node_width"], cfg["num_heads"]
    rows, cols = qkv_rows(width, heads), out_columns(width, heads)
    keys.put("backbone.node_embed.table.weight", "nodef_embed.weight")
    keys.put("backbone.edge_embed.table.weight", "featm_embed.weight")
    keys.put("backbone.hop_embed.weight", "dist_embed.weight")
    if cfg["svd_rank"]:
        keys.put("backbone.svd_embed.weight", "svd_embed.weight", lambda t: t[:, svd_columns(cfg["svd_rank"])])
        keys.put("backbone.svd_embed.bias", "svd_embed.bias")
    if cfg["num_virtual_nodes"]:
        keys.put("backbone.virtual_nodes.node", "vn_layer.vn_node_embeddings")
        keys.put("backbone.virtual_nodes.edge", "vn_layer.vn_edge_embeddings")
    for i in range(cfg["num_layers"]):
        src, dst = f"EGT_layers.{i}.", f"backbone.layers.{i}."
        pairs = {"ln_h": "mha_ln_h", "ln_e": "mha_ln_e", "ffn_h.ln": "ffn_ln_h", "ffn_h.fc1": "lin_W_h_1", "ffn_h.fc2": "lin_W_h_2"}
        if not cfg["simple"] and i < cfg["num_layers"] - 1:
            pairs.update({"out_e": "lin_O_e", "ffn_e.ln": "ffn_ln_e", "ffn_e.fc1": "lin_W_e_1", "ffn_e.fc2": "lin_W_e_2"})
        for ours, theirs in pairs.items():
            keys.put(dst + ours + ".weight", src + theirs + ".weight")
            keys.put(dst + ours + ".bias", src + theirs + ".bias")
        keys.put(dst + "qkv.weight", src + "lin_QKV.weight", lambda t: t[rows])
        keys.put(dst + "qkv.bias", src + "lin_QKV.bias", lambda t: t[rows])
        keys.put(dst + "out_h.weight", src + "lin_O_h.weight", lambda t: t[:, cols])
        keys.put(dst + "out_h.bias", src + "lin_O_h.bias")
        for part in ("weight", "bias"):
            keys.put(dst + f"edge_in.{part}", [src + f"lin_E.{part}", src + f"lin_G.{part}"], lambda e, g: torch.cat([e, g]))
    keys.put("backbone.final_ln_h.weight", "final_ln_h.weight")
    keys.put("backbone.final_ln_h.bias", "final_ln_h.bias")
    for i in range(len(cfg["head"]["hidden"]) + 1):
        keys.put(f"head.mlp.layers.{i}.weight", f"mlp_layers.{i}.weight")
        keys.put(f"head.mlp.layers.{i}.bias", f"mlp_layers.{i}.bias")
    return keys.finish()


def import_egt(checkpoint, where: str) -> tuple[dict, dict]:
    """(gtscale state dict, model config with head) of an egt_pytorch state dict."""
    state = egt_state(checkpoint, where)
    cfg = model_config(state, where)
    return convert(state, cfg, where), cfg
