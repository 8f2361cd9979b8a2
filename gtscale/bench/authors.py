"""`gtscale bench model --authors PATH`: gtscale's model side by side with the authors' own code
on the same batch, with the same weights, in one process.

PATH is a checkout of the authors' repository for the model's architecture, which the user
provides (it is never a dependency of gtscale and nothing of it is copied here):

- EGT: shamim-hussain/egt_pytorch; its lib/models/egt_molgraph.py (EGT_MOL, with egt.py and
  egt_layers.py) is the whole model, embeddings and MLP head included;
- Graphormer: microsoft/Graphormer; its pure-torch encoder graphormer/modules/
  graphormer_graph_encoder.py (with graphormer_layers.py, graphormer_graph_encoder_layer.py,
  multihead_attention.py). The files are loaded one by one, not through the graphormer package,
  whose __init__ registers fairseq tasks and models. The output head of their fairseq model
  (models/graphormer.py) is not loaded: both sides use gtscale's head on the graph token.

The two models compute the same function: gtscale's weights are copied into the authors' modules
through the checkpoint importer run backwards (interop.mapping.invert: the importer's one table
of names and layouts), and the outputs and every parameter's gradient are checked to agree in
fp32 before anything is timed (a benchmark of two different functions would be worthless).
EGT is checked one molecule at a time: the authors' virtual nodes also attend to padding nodes
(egt_layers.VirtualNodes pads the mask with 0), so their padded outputs depend on the padding.

Timing: training steps (forward, backward, AdamW) of the two alternate, the order swapped every
step, so that the load of other processes falls on both alike; graphs/s from each median step
time, and the ratio gtscale ÷ authors.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gtscale.bench.molecules import PCQM4MV2_MAX_ATOMS, molecule_batch, sample_molecules
from gtscale.bench.step import adamw, device_named
from gtscale.errors import UserError
from gtscale.format.schema import SPD_UNREACHABLE
from gtscale.interop import egt as egt_interop
from gtscale.interop import graphormer as graphormer_interop
from gtscale.models.export import build_exported
from gtscale.interop.mapping import invert
from gtscale.io import atomic_write_text
from gtscale.loader.batch import Batch
from gtscale.models import load_model_config, parse_model_config
from gtscale.models.graphormer import UNREACHABLE_HOPS
from gtscale.models.outputs import Outputs

#: Largest output / relative gradient difference accepted as "the same function" in fp32.
OUTPUT_TOLERANCE = 1e-4
GRADIENT_TOLERANCE = 1e-3


# --- loading the authors' files ----------------------------------------------------------------

def _package(name: str, folder: Path) -> types.ModuleType:
    """A namespace for the authors' modules in `folder`, so that their relative imports resolve
    without running the folder's __init__.py."""
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package
    return package


def _require(path: Path, relative: str, repository: str) -> Path:
    folder = path / relative
    if not folder.is_dir():
        raise UserError(f"--authors {path}: no {relative}/ (expected a checkout of {repository})")
    return folder


def load_egt_mol(path: Path) -> type:
    """EGT_MOL of an egt_pytorch checkout."""
    folder = _require(path, "lib/models", "github.com/shamim-hussain/egt_pytorch")
    _package("_gtscale_authors_egt", folder)
    return importlib.import_module("_gtscale_authors_egt.egt_molgraph").EGT_MOL


@contextlib.contextmanager
def _fairseq_shim():
    """Graphormer's encoder files import four small fairseq utilities. fairseq itself is used when
    installed; it is not a gtscale dependency (and does not install on current PyTorch), so
    otherwise, and only while the files load, these stand in for it, each doing what fairseq's
    does on the inputs the encoder gives them (CPU or CUDA without apex): dropout that is off in
    eval, torch's LayerNorm, fairseq's float32 softmax and GELU, no quantisation noise."""
    if importlib.util.find_spec("fairseq") is not None:
        yield
        return

    class FairseqDropout(nn.Module):
        def __init__(self, p, module_name=None):
            super().__init__()
            self.p = p

        def forward(self, x, inplace: bool = False):
            return F.dropout(x, p=self.p, training=True, inplace=inplace) if self.p > 0 and self.training else x

    def layer_norm(normalized_shape, eps=1e-5, elementwise_affine=True, export=False):
        return nn.LayerNorm(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)

    class LayerDropModuleList(nn.ModuleList):
        def __init__(self, p, modules=None):
            raise NotImplementedError("layerdrop > 0 is not benchmarked")

    def quant_noise(module, p, block_size):
        if p > 0:
            raise NotImplementedError("quantisation noise is not benchmarked")
        return module

    def gelu(x):  # fairseq.modules.gelu.gelu
        return F.gelu(x.float()).type_as(x)

    def get_activation_fn(name):
        return {"gelu": gelu, "relu": F.relu, "tanh": torch.tanh, "linear": lambda x: x}[name]

    def softmax(x, dim, onnx_trace=False):
        return F.softmax(x, dim=dim, dtype=torch.float32)

    fake = {name: types.ModuleType(name) for name in
            ("fairseq", "fairseq.utils", "fairseq.modules", "fairseq.modules.fairseq_dropout", "fairseq.modules.quant_noise")}
    fake["fairseq"].utils, fake["fairseq"].modules = fake["fairseq.utils"], fake["fairseq.modules"]
    fake["fairseq.utils"].get_activation_fn, fake["fairseq.utils"].softmax = get_activation_fn, softmax
    for name in ("fairseq.modules", "fairseq.modules.fairseq_dropout"):
        fake[name].FairseqDropout = FairseqDropout
    fake["fairseq.modules"].LayerNorm, fake["fairseq.modules"].LayerDropModuleList = layer_norm, LayerDropModuleList
    fake["fairseq.modules.quant_noise"].quant_noise = quant_noise
    sys.modules.update(fake)
    try:
        yield
    finally:
        for name in fake:
            sys.modules.pop(name, None)


def load_graphormer_encoder(path: Path) -> type:
    """GraphormerGraphEncoder of a microsoft/Graphormer checkout."""
    folder = _require(path, "graphormer/modules", "github.com/microsoft/Graphormer")
    _package("_gtscale_authors_graphormer", folder)
    with _fairseq_shim():
        return importlib.import_module("_gtscale_authors_graphormer.graphormer_graph_encoder").GraphormerGraphEncoder


# --- the authors' models, with gtscale's weights -----------------------------------------------

def _unsupported(cfg, fields: dict) -> None:
    wrong = [f"{k}: {getattr(cfg, k)}" for k, v in fields.items() if getattr(cfg, k) != v]
    if wrong:
        raise UserError(f"--authors: the authors' code has no counterpart for {', '.join(wrong)}")


class AuthorsEGT(nn.Module):
    """egt_pytorch's EGT_MOL (embeddings, layers, MLP head) sized like gtscale's EGT config."""

    def __init__(self, egt_mol: type, cfg, head: dict):
        super().__init__()
        _unsupported(cfg, {"gated": True, "constrained": False, "output_edges": False, "node_float_dim": 0})
        if head.get("kind", "graph") != "graph" or head.get("activation", "elu") != cfg.activation:
            raise UserError("--authors: EGT's head is a graph MLP with the model's activation in the authors' code")
        self.cfg = cfg
        self.net = egt_mol(
            node_width=cfg.node_width, edge_width=cfg.edge_width, num_heads=cfg.num_heads, model_height=cfg.num_layers,
            node_mha_dropout=cfg.node_dropout, node_ffn_dropout=cfg.node_dropout, edge_mha_dropout=cfg.edge_dropout,
            edge_ffn_dropout=cfg.edge_dropout, attn_dropout=cfg.attention_dropout, attn_maskout=cfg.attn_maskout,
            activation=cfg.activation, clip_logits_value=list(cfg.clip_logits), node_ffn_multiplier=cfg.node_ffn_multiplier,
            edge_ffn_multiplier=cfg.edge_ffn_multiplier, scale_degree=cfg.scale_degree, egt_simple=cfg.simple,
            upto_hop=cfg.upto_hop, mlp_ratios=[w / cfg.node_width for w in head.get("hidden", [])],
            num_virtual_nodes=cfg.num_virtual_nodes, svd_encodings=cfg.svd_rank, output_dim=head.get("num_outputs", 1),
        )

    def state_for(self, ours: dict, importer_cfg: dict) -> dict:
        shapes = {k: tuple(v.shape) for k, v in self.net.state_dict().items()}
        return invert(lambda s: egt_interop.convert(s, importer_cfg, "authors' EGT"), shapes, ours)

    def load(self, ours: dict, importer_cfg: dict) -> None:
        self.net.load_state_dict(self.state_for(ours, importer_cfg))

    def inputs(self, batch: Batch, model: nn.Module) -> dict:
        """Their input dict: table rows with their offsets (the same rows as gtscale's tables,
        which the importer copies as they are), hops, and SVD columns interleaved u₀ v₀ u₁ v₁ …"""
        data = {
            "node_features": model.node_embed.rows(batch.node_feat),
            "node_mask": batch.node_mask,
            "distance_matrix": batch.spd,
            "feature_matrix": model.edge_embed.rows(batch.edge_feat),
        }
        r = self.cfg.svd_rank
        if r:
            half = batch.svd_pe.shape[-1] // 2  # gtscale stores U√Σ ‖ V√Σ of rank ≥ r; EGT reads the top r of each
            ours = torch.cat([batch.svd_pe[..., :r], batch.svd_pe[..., half:half + r]], dim=-1).float()
            theirs = torch.empty_like(ours)
            theirs[..., egt_interop.svd_columns(r)] = ours
            data["svd_encodings"] = theirs
        return data

    def forward(self, data: dict) -> torch.Tensor:
        return self.net(dict(data))


class AuthorsGraphormer(nn.Module):
    """microsoft/Graphormer's GraphormerGraphEncoder sized like gtscale's Graphormer config, and
    gtscale's head (a copy) on its graph token."""

    def __init__(self, encoder_class: type, cfg, head: nn.Module):
        super().__init__()
        _unsupported(cfg, {"node_float_dim": 0})
        if cfg.final_ln and cfg.post_ln:
            raise UserError("--authors: Graphormer with post_ln and final_ln has no counterpart in the authors' code")
        self.cfg = cfg
        self.encoder = encoder_class(
            num_atoms=sum(cfg.node_vocab), num_in_degree=cfg.num_in_degree, num_out_degree=cfg.num_out_degree,
            num_edges=sum(cfg.edge_vocab), num_spatial=cfg.num_spatial, num_edge_dis=cfg.num_edge_dis, edge_type="multi_hop",
            multi_hop_max_dist=cfg.multi_hop_max_dist, num_encoder_layers=cfg.num_layers, embedding_dim=cfg.node_width,
            ffn_embedding_dim=cfg.ffn_dim, num_attention_heads=cfg.num_heads, dropout=cfg.dropout,
            attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
            encoder_normalize_before=cfg.embedding_ln, pre_layernorm=not cfg.post_ln, activation_fn="gelu",
        )
        self.head = copy.deepcopy(head)

    def load(self, ours: dict, importer_cfg: dict) -> None:
        enc = graphormer_interop.ENC
        shapes = {enc + k: tuple(v.shape) for k, v in self.encoder.state_dict().items()}
        backbone = {k: v for k, v in ours.items() if k.startswith("backbone.") and not k.startswith("backbone.final_ln.")}
        state = invert(lambda s: graphormer_interop.convert(s, importer_cfg, "authors' Graphormer", head=False), shapes, backbone)
        if self.cfg.final_ln:
            # The paper's Pre-LN layout ends in a LayerNorm; the authors' Pre-LN encoder builds
            # it (final_layer_norm) but its forward does not apply it, so forward() does, and the
            # importer (which drops the unused tensor of released checkpoints) has no row for it.
            for part in ("weight", "bias"):
                state[enc + f"final_layer_norm.{part}"] = ours[f"backbone.final_ln.{part}"]
        self.encoder.load_state_dict({k.removeprefix(enc): v for k, v in state.items()})
        self.head.load_state_dict({k.removeprefix("head."): v for k, v in ours.items() if k.startswith("head.")})

    def inputs(self, batch: Batch, model: nn.Module) -> dict:
        """Their batched_data: atom / path-edge rows shifted by the importer's row shifts,
        degree + 1, spatial_pos = hops + 1 with unreachable in the last row, 0 on padding; the
        attention bias their collator starts from: -inf between nodes spatial_pos_max hops apart
        or more, where the config sets it."""
        cfg, mask = self.cfg, batch.node_mask
        pair_mask = mask[:, :, None] & mask[:, None, :]
        edge_rows = model.path_encoding.edges.rows
        spatial = torch.where(batch.spd == SPD_UNREACHABLE, cfg.num_spatial - 1, (batch.spd + 1).clamp(max=cfg.num_spatial - 2))
        b, n = mask.shape
        attn_bias = torch.zeros(b, n + 1, n + 1)
        if cfg.spatial_pos_max is not None:
            far = torch.where(batch.spd == SPD_UNREACHABLE, UNREACHABLE_HOPS, batch.spd.long()) >= cfg.spatial_pos_max
            attn_bias[:, 1:, 1:] = attn_bias[:, 1:, 1:].masked_fill(far & pair_mask, float("-inf"))
        return {
            "x": torch.where(batch.node_feat > 0, model.atom_embed.rows(batch.node_feat) + graphormer_interop.ATOM_ROW_SHIFT, 0),
            "in_degree": model._degree_rows(batch.in_degree, mask, cfg.num_in_degree),
            "out_degree": model._degree_rows(batch.out_degree, mask, cfg.num_out_degree),
            "spatial_pos": torch.where(pair_mask, spatial, 0),
            "attn_bias": attn_bias,
            "edge_input": torch.where(batch.path_edges > 0, edge_rows(batch.path_edges) + graphormer_interop.BOND_ROW_SHIFT, 0),
            "attn_edge_type": torch.where(batch.edge_feat > 0, edge_rows(batch.edge_feat) + graphormer_interop.BOND_ROW_SHIFT, 0),
        }

    def forward(self, data: dict) -> torch.Tensor:
        _, graph = self.encoder(data, last_state_only=True)
        if self.cfg.final_ln:
            graph = self.encoder.final_layer_norm(graph)
        return self.head(Outputs(node=None, edge=None, graph=graph))


def importer_config(cfg: dict) -> dict:
    """The config dict the importers' convert() reads: every typed field, and the head."""
    return dataclasses.asdict(parse_model_config(cfg)) | {"head": {"hidden": [], **(cfg.get("head") or {})}}


def load_authors(cfg: dict, path: Path) -> type:
    """The authors' model class for `cfg`'s architecture from the checkout at `path`."""
    loaders = {"egt": load_egt_mol, "graphormer": load_graphormer_encoder}
    if cfg["name"] not in loaders:
        raise UserError(f"--authors: no authors' code is benchmarked for {cfg['name']} (EGT and Graphormer are)")
    return loaders[cfg["name"]](path)


def authors_model(cfg: dict, path: Path, ours: nn.Module) -> nn.Module:
    """The authors' module of `cfg` from the checkout at `path`, holding `ours`' weights."""
    typed, authors_class = parse_model_config(cfg), load_authors(cfg, path)
    if cfg["name"] == "egt":
        theirs = AuthorsEGT(authors_class, typed, cfg.get("head") or {})
    else:
        theirs = AuthorsGraphormer(authors_class, typed, ours.head)
    theirs.load(ours.state_dict(), importer_config(cfg))
    return theirs


# --- the same function? ------------------------------------------------------------------------

def _ours_forward(ours: nn.Module, batch: Batch) -> torch.Tensor:
    return ours.head(ours.backbone(batch))


def _gradients_as_ours(theirs: nn.Module, cfg: dict) -> dict:
    """The authors' gradients under gtscale's names, through the importer (authors → gtscale)."""
    importer = importer_config(cfg)
    if isinstance(theirs, AuthorsEGT):
        grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)) for k, p in theirs.net.named_parameters()}
        return egt_interop.convert(grads, importer, "authors' gradients")
    enc = graphormer_interop.ENC
    params = dict(theirs.encoder.named_parameters())
    grads = {enc + k: (p.grad if p.grad is not None else torch.zeros_like(p)) for k, p in params.items()}
    out = graphormer_interop.convert(grads, importer, "authors' gradients", head=False)
    if theirs.cfg.final_ln:
        out |= {f"backbone.final_ln.{part}": grads[enc + f"final_layer_norm.{part}"] for part in ("weight", "bias")}
    return out | {"head." + k: p.grad for k, p in theirs.head.named_parameters()}


def check_agreement(ours: nn.Module, theirs: nn.Module, batches: list[Batch], cfg: dict) -> dict:
    """Max output difference and max relative gradient difference (per tensor, against its
    largest element) over `batches`, fp32, dropout off; UserError when they are not the same
    function (an authors' checkout of another version, say)."""
    ours.eval(), theirs.eval()
    ours.zero_grad(set_to_none=True), theirs.zero_grad(set_to_none=True)
    output_diff, scale = 0.0, 0.0
    for batch in batches:
        a, b = _ours_forward(ours, batch), theirs(theirs.inputs(batch, ours.backbone))
        output_diff = max(output_diff, (a - b).abs().max().item())
        scale = max(scale, a.abs().max().item())
        a.sum().backward(), b.sum().backward()
    grads = _gradients_as_ours(theirs, cfg)
    grad_diff = 0.0
    for name, p in ours.named_parameters():
        mine = p.grad if p.grad is not None else torch.zeros_like(p)
        grad_diff = max(grad_diff, ((mine - grads[name]).abs().max() / mine.abs().max().clamp(min=1e-12)).item())
    ours.zero_grad(set_to_none=True), theirs.zero_grad(set_to_none=True)
    if output_diff > OUTPUT_TOLERANCE * max(scale, 1.0) or grad_diff > GRADIENT_TOLERANCE:
        raise UserError(f"--authors: the authors' model computes another function (max output difference {output_diff:.2e}, "
                        f"max relative gradient difference {grad_diff:.2e}); nothing was timed")
    return {"max_output_diff": output_diff, "max_relative_grad_diff": grad_diff}


# --- timing --------------------------------------------------------------------------------------

def _trainer(forward, params: list, target: torch.Tensor, autocast):
    optimizer, name = adamw(params)

    def step() -> None:
        with autocast:
            scores = forward()
        (scores.float() - target).abs().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, name


def time_interleaved(steps: dict, count: int, warmup: int, sync) -> dict[str, list[float]]:
    """Seconds of each of `steps` per round, alternating; the order is reversed every round."""
    names = list(steps)
    times = {name: [] for name in names}
    for i in range(warmup + count):
        for name in (names if i % 2 == 0 else names[::-1]):
            sync()
            start = time.perf_counter()
            steps[name]()
            sync()
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def bench_authors(authors: Path, *, model: str = "egt-small", batch_size: int = 32, precisions: list[str] = ("fp32", "bf16"),
                  steps: int = 10, warmup: int = 3, pad_to: int | None = None, threads: int = 1, device: str = "auto", seed: int = 0,
                  json_path: Path | None = None) -> int:
    """The `--authors` form of `gtscale bench model`: gtscale's `model` against the authors' code in
    the checkout `authors`, timed interleaved; the figures also to `json_path`."""
    if batch_size < 1 or steps < 1 or warmup < 0 or threads < 1:
        raise UserError("--batch-size, --steps and --threads must be positive, --warmup >= 0")
    if not authors.is_dir():
        raise UserError(f"--authors {authors}: not a folder (a checkout of the authors' repository)")
    cfg = load_model_config(model)
    typed = parse_model_config(cfg)
    load_authors(cfg, authors)  # a wrong folder is an error before the batch is built
    torch.set_num_threads(threads)
    device = torch.device(device_named(device))
    load_before = os.getloadavg()[0]

    smiles = sample_molecules(batch_size, seed, pad_to or PCQM4MV2_MAX_ATOMS)
    options = (getattr(typed, "svd_rank", 0), getattr(typed, "multi_hop_max_dist", 0))
    batch = molecule_batch(smiles, pad_to, *options)
    torch.manual_seed(seed)
    ours = build_exported(cfg)
    theirs = authors_model(cfg, authors, ours)
    count = {name: sum(p.numel() for p in m.parameters()) for name, m in (("gtscale", ours), ("authors", theirs))}
    if count["gtscale"] != count["authors"]:
        raise UserError(f"--authors {authors}: the authors' model has {count['authors']:,} parameters, gtscale's {count['gtscale']:,}")
    # EGT one molecule at a time (see the module docstring), Graphormer on the padded batch
    checks = [molecule_batch([s], None, *options) for s in smiles] if cfg["name"] == "egt" else [batch]
    agreement = check_agreement(ours, theirs, checks, cfg)

    ours, theirs, batch = ours.to(device).train(), theirs.to(device).train(), batch.to(device)
    data = {k: v.to(device) for k, v in theirs.inputs(batch, ours.backbone).items()}
    target = torch.randn(batch.num_graphs, ours.head.cfg.num_outputs, device=device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    results = []
    for precision in precisions:
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
        step_ours, optimizer = _trainer(lambda: _ours_forward(ours, batch), list(ours.parameters()), target, autocast)
        step_theirs, _ = _trainer(lambda: theirs(data), list(theirs.parameters()), target, autocast)
        times = time_interleaved({"gtscale": step_ours, "authors": step_theirs}, steps, warmup, sync)
        rates = {name: batch.num_graphs / statistics.median(t) for name, t in times.items()}
        pairs = [a / g for g, a in zip(times["gtscale"], times["authors"])]
        results.append({
            "precision": precision,
            "gtscale_graphs_per_s": rates["gtscale"], "authors_graphs_per_s": rates["authors"],
            "gtscale_step_ms": statistics.median(times["gtscale"]) * 1e3, "authors_step_ms": statistics.median(times["authors"]) * 1e3,
            "ratio": rates["gtscale"] / rates["authors"], "ratio_median_of_pairs": statistics.median(pairs),
            "optimizer": optimizer,
        })
    atoms = batch.node_mask.sum(dim=1)
    setup = {
        "model": str(model), "authors": str(authors.resolve()), "batch_size": batch_size,
        "atoms_mean": atoms.float().mean().item(), "atoms_max": int(atoms.max()), "padded_nodes": batch.max_graph_nodes,
        "seed": seed, "threads": threads, "steps": steps, "warmup": warmup, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "parameters": count["gtscale"], "agreement": agreement, "checked_on": f"{len(checks)} batch(es)",
        "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
    }
    _print(setup, results)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json_path, json.dumps({"setup": setup, "results": results}, indent=2) + "\n")
    return 0


def _print(setup: dict, results: list[dict]) -> None:
    agreement = setup["agreement"]
    print(f"model: {setup['model']} ({setup['parameters']:,} parameters in both); authors' code: {setup['authors']}")
    print(f"batch: {setup['batch_size']} NCI molecules, heavy atoms mean {setup['atoms_mean']:.1f} max {setup['atoms_max']}, "
          f"padded N = {setup['padded_nodes']}; seed {setup['seed']}")
    print(f"same function: max output difference {agreement['max_output_diff']:.1e}, max relative gradient difference "
          f"{agreement['max_relative_grad_diff']:.1e} (fp32, {setup['checked_on']})")
    print(f"device: {setup['device']}; threads {setup['threads']}; torch {setup['torch']}; steps {setup['steps']} "
          f"(+{setup['warmup']} warmup) each, interleaved; {results[0]['optimizer']}; 1-min load average "
          f"{setup['load_average_before']:.2f} before, {setup['load_average_after']:.2f} after")
    print(f"{'precision':<10}{'gtscale g/s':>12}{'authors g/s':>12}{'gtscale ms':>12}{'authors ms':>12}{'gtscale/authors':>17}")
    for r in results:
        print(f"{r['precision']:<10}{r['gtscale_graphs_per_s']:>12.1f}{r['authors_graphs_per_s']:>12.1f}{r['gtscale_step_ms']:>12.1f}"
              f"{r['authors_step_ms']:>12.1f}{r['ratio']:>16.2f}x")
