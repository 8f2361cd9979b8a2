"""`gtscale bench model`: training throughput (forward + backward + AdamW) and peak memory of a
model on one fixed, seeded batch of real molecules of PCQM4Mv2's size distribution.

The batch: molecules of RDKit's bundled NCI sample (Data/NCI/first_5K.smi) with 1..51 heavy
atoms (PCQM4Mv2's range; at most --pad-to when given), drawn without replacement with weights
exp(λ·atoms), λ solved so that the weighted mean is PCQM4Mv2's 14.1 atoms: the distribution
closest to NCI's own (in KL divergence) with PCQM4Mv2's mean. Molecules go through the data
pipeline itself: gtscale.prep.featurize (identical to ogb.utils.smiles2graph), .structure, and
the dense Batch of .collate. Each precision is measured in a fresh process, so that peak
memory is that run's alone.

Figures: graphs/s from the median step time (robust to other processes briefly taking the CPU;
the load average before and after is printed to judge that); peak memory (CUDA:
max_memory_allocated; CPU: peak RSS minus the RSS before the model was built, i.e. parameters,
gradients, optimizer state and activations); FLOPs per step counted by torch's FlopCounterMode, and on a GPU of known peak the
model FLOP utilisation. The loss is PCQM4Mv2's MAE against fixed random targets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from gtscale.io import atomic_write_text
from gtscale.format import schema
from gtscale.loader.batch import Batch
from gtscale.errors import UserError
from gtscale.models import build_head, build_model, load_model_config, parse_model_config

#: PCQM4Mv2's heavy-atom counts: 1..51, mean 14.1.
PCQM4MV2_MAX_ATOMS = 51
PCQM4MV2_MEAN_ATOMS = 14.1

#: Dense peak FLOP/s by GPU name and precision (fp32 = no TF32, PyTorch's default for matmul).
PEAK_FLOPS = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="egt-small", help="config name in configs/models/ or a YAML path")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--pad-to", type=int, default=None, help="pad to this many nodes (molecules at most this big)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when present)")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing per layer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU when not in the built-in table")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")


# --- the batch ---------------------------------------------------------------------------------

def _nci_smiles() -> list[tuple[str, int]]:
    """(SMILES, heavy atoms) of every parsable molecule in RDKit's NCI sample."""
    from rdkit import Chem, RDConfig, RDLogger

    RDLogger.DisableLog("rdApp.*")
    path = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
    out = []
    for line in path.read_text().splitlines():
        smiles = line.split()[0] if line.strip() else ""
        mol = Chem.MolFromSmiles(smiles) if smiles else None
        if mol is not None and mol.GetNumAtoms() > 0:
            out.append((smiles, mol.GetNumAtoms()))
    return out


def _tilt(sizes: np.ndarray, mean: float) -> np.ndarray:
    """Probabilities ∝ exp(λ·size) whose mean size is `mean` (bisection on λ)."""
    lo, hi = -5.0, 5.0
    for _ in range(100):
        lam = (lo + hi) / 2
        w = np.exp(lam * (sizes - sizes.mean()))
        if (w * sizes).sum() / w.sum() > mean:
            hi = lam
        else:
            lo = lam
    return w / w.sum()


def sample_molecules(count: int, seed: int, max_atoms: int) -> list[str]:
    """`count` NCI SMILES with PCQM4Mv2's size range and mean, fixed by `seed`."""
    pool = [(s, n) for s, n in _nci_smiles() if 1 <= n <= min(max_atoms, PCQM4MV2_MAX_ATOMS)]
    if len(pool) < count:
        raise UserError(f"--batch-size: only {len(pool)} NCI molecules have at most {max_atoms} atoms")
    sizes = np.array([n for _, n in pool], dtype=np.float64)
    chosen = np.random.default_rng(seed).choice(len(pool), size=count, replace=False, p=_tilt(sizes, PCQM4MV2_MEAN_ATOMS))
    return [pool[i][0] for i in chosen]


#: Batch fields of the bench, and whether each is per pair ([B, N, N, ...]) or per node.
_PAIR_FIELDS = ("edge_feat", "spd", "path_edges")
_NODE_FIELDS = ("node_feat", "node_mask", "in_degree", "out_degree", "svd_pe")


def _pad_field(name: str, t: torch.Tensor, extra: int) -> torch.Tensor:
    """Pad the node dimension(s) by `extra` with collate's padding values: SPD_UNREACHABLE for
    hops, 0 / False for everything else."""
    node_dims = 2 if name in _PAIR_FIELDS else 1
    widths = [0, 0] * (t.dim() - 1 - node_dims) + [0, extra] * node_dims
    return torch.nn.functional.pad(t, widths, value=schema.SPD_UNREACHABLE if name == "spd" else 0)


def _pad(batch: Batch, num_nodes: int) -> Batch:
    extra = num_nodes - batch.max_nodes
    if extra <= 0:
        return batch
    fields = {name: _pad_field(name, getattr(batch, name), extra) for name in _PAIR_FIELDS + _NODE_FIELDS}
    return Batch(**fields, idx=batch.idx)


def molecule_batch(smiles: list[str], pad_to: int | None, svd_rank: int, path_hops: int) -> Batch:
    """Dense Batch of the molecules through the data pipeline's own featurizer, structure and
    collate, padded to the largest molecule or to `pad_to` nodes."""
    from gtscale.loader.collate import collate
    from gtscale.format.decode import Record
    from gtscale.prep.featurize import featurize_smiles
    from gtscale.prep.structure import StructureOptions, structure

    options = StructureOptions(svd_rank=max(svd_rank, 1), lap_k=0)
    records = []
    for i, s in enumerate(smiles):
        arrays = featurize_smiles(s)
        n = arrays[schema.X].shape[0]
        arrays.update(structure(arrays[schema.EDGE_INDEX], n, options))
        records.append(Record(key=f"nci-{i}", shard="bench", num_nodes=n, idx=i, arrays=arrays))
    keys = (schema.SPD, schema.IN_DEGREE, schema.OUT_DEGREE, schema.SVD_PE)
    return _pad(collate(records, keys, max_dist=max(path_hops, 1)), pad_to or 0)


# --- one measurement (in its own process) ------------------------------------------------------

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _adamw(params) -> tuple[torch.optim.Optimizer, str]:
    try:
        return torch.optim.AdamW(params, lr=1e-4, fused=True), "AdamW (fused)"
    except (RuntimeError, TypeError):  # no fused kernel for this device
        return torch.optim.AdamW(params, lr=1e-4, foreach=True), "AdamW (foreach)"


def _graph_head(cfg: dict) -> dict:
    """The YAML's head when it is a graph head (the paper's), else one graph-regression output."""
    head = cfg.get("head") or {}
    return head if head.get("kind", "graph") == "graph" else {"kind": "graph"}


def _peak_flops(device: torch.device, precision: str, override: float | None) -> float | None:
    if override:
        return override * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peaks[precision] for key, peaks in PEAK_FLOPS.items() if key in name), None)


def measure(cfg: dict, batch: Batch, precision: str, steps: int, warmup: int, threads: int,
            device_name: str, seed: int, peak_tflops: float | None) -> dict:
    """Train `steps` timed steps on `batch`; the figures of one precision."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = torch.device(device_name)
    batch = batch.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = _rss_bytes()
    model = build_model(cfg).to(device).train()
    head = build_head(_graph_head(cfg), model).to(device)
    params = [*model.parameters(), *head.parameters()]
    optimizer, optimizer_name = _adamw(params)
    target = torch.randn(batch.num_graphs, head.cfg.num_outputs, device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def step() -> None:
        with autocast:
            scores = head(model(batch))
        loss = (scores.float() - target).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        step()
    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    if device.type == "cuda":
        peak_mem = torch.cuda.max_memory_allocated(device)
    else:
        peak_mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    achieved = flops / seconds
    peak = _peak_flops(device, precision, peak_tflops)
    return {
        "precision": precision,
        "graphs_per_s": batch.num_graphs / seconds,
        "step_ms": seconds * 1e3,
        "step_ms_min": min(times) * 1e3,
        "peak_mem_mb": peak_mem / 2**20,
        "gflop_per_step": flops / 1e9,
        "achieved_tflops": achieved / 1e12,
        "mfu": achieved / peak if peak else None,
        "parameters": sum(p.numel() for p in params),
        "optimizer": optimizer_name,
    }


# --- the command ---------------------------------------------------------------------------------

def _device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device: {name} requested but CUDA is not available")
    return name


def _print(setup: dict, results: list[dict]) -> None:
    print("model config:")
    for key, value in setup["model_config"].items():
        print(f"  {key}: {value}")
    print(
        f"batch: {setup['batch_size']} NCI molecules, heavy atoms mean {setup['atoms_mean']:.1f} "
        f"max {setup['atoms_max']}, padded N = {setup['padded_nodes']}; seed {setup['seed']}"
    )
    print(
        f"device: {setup['device']}; threads {setup['threads']}; torch {setup['torch']}; "
        f"steps {setup['steps']} (+{setup['warmup']} warmup); parameters {results[0]['parameters']:,}; "
        f"{results[0]['optimizer']}; "
        f"activation checkpointing {setup['checkpointing']}; 1-min load average "
        f"{setup['load_average_before']:.2f} before, {setup['load_average_after']:.2f} after"
    )
    print(f"{'precision':<10}{'graphs/s':>10}{'step ms':>10}{'min ms':>9}{'peak MiB':>10}{'GFLOP/step':>12}{'TFLOP/s':>9}{'MFU':>7}")
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        print(
            f"{r['precision']:<10}{r['graphs_per_s']:>10.1f}{r['step_ms']:>10.1f}{r['step_ms_min']:>9.1f}{r['peak_mem_mb']:>10.0f}"
            f"{r['gflop_per_step']:>12.1f}{r['achieved_tflops']:>9.3f}{mfu:>7}"
        )


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        raise UserError("--batch-size, --steps and --threads must be positive, --warmup >= 0")
    cfg = load_model_config(args.model)
    typed = parse_model_config(cfg)
    if args.checkpointing:
        cfg["activation_checkpointing"] = True
    device = _device(args.device)
    smiles = sample_molecules(args.batch_size, args.seed, args.pad_to or PCQM4MV2_MAX_ATOMS)
    batch = molecule_batch(smiles, args.pad_to, getattr(typed, "svd_rank", 0), getattr(typed, "multi_hop_max_dist", 0))
    atoms = batch.node_mask.sum(dim=1)
    setup = {
        "model": str(args.model),
        "model_config": {k: v for k, v in cfg.items() if k != "head"} | {"head": _graph_head(cfg)},
        "batch_size": args.batch_size,
        "padded_nodes": batch.max_nodes,
        "atoms_mean": atoms.float().mean().item(),
        "atoms_max": int(atoms.max()),
        "seed": args.seed,
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu ({platform.processor() or platform.machine()})",
        "threads": args.threads,
        "torch": torch.__version__,
        "steps": args.steps,
        "warmup": args.warmup,
        "checkpointing": args.checkpointing,
        "load_average_before": os.getloadavg()[0],
    }
    context = multiprocessing.get_context("spawn")
    results = []
    for precision in args.precision:
        with context.Pool(1) as pool:
            results.append(pool.apply(measure, (cfg, batch, precision, args.steps, args.warmup, args.threads, device, args.seed, args.peak_tflops)))
    setup["load_average_after"] = os.getloadavg()[0]
    _print(setup, results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps({"setup": setup, "results": results}, indent=2, default=str) + "\n")
    return 0
