"""`gtscale bench model`: training throughput (forward + backward + AdamW) and peak memory of a
model on one fixed, seeded batch of real molecules of PCQM4Mv2's size distribution (at most
--pad-to atoms when given; bench/molecules.py). Each precision is measured in a fresh process, so
that peak memory is that run's alone.

Figures: graphs/s from the median step time (robust to other processes briefly taking the CPU;
the load average before and after is printed to judge that); CPU ms, the median step's CPU time
of the process, all threads (on a loaded machine the wall time of a step stretches with every
wait for a core, its CPU time far less; with --threads 1 no thread spins waiting for another);
peak memory (CUDA:
max_memory_allocated; CPU: peak RSS minus the RSS before the model was built, i.e. parameters,
gradients, optimizer state and activations); FLOPs per step counted by torch's FlopCounterMode, and on a GPU of known peak the
model FLOP utilisation. The loss is PCQM4Mv2's MAE against fixed random targets.

Sparse models (the sparse Energy Transformer; MNA-GT with --graph generated) are measured on a
generated graph instead: --nodes nodes and --edges uniformly random directed edges with
continuous and/or categorical node features as the model reads them and 5 % anomalous node
labels, as one EdgeBatch (MNA-GT: split into graphs of --graph-nodes nodes, its ego subgraphs);
the loss is App. C's weighted BCE of a node head, the figures nodes/s and peak memory.

--compile adds a row for the model under torch.compile (fullgraph, inductor's default mode);
--cuda-graphs (CUDA only) one compiled with mode reduce-overhead, whose steps replay captured
CUDA graphs instead of launching each kernel from Python.

--profile FILE.md: after the timed steps each row (precision × implementation) trains one more
step under torch.profiler, and FILE.md gets, per row, the --profile-rows (15) kernels (CUDA; CPU:
the operators) of most self time, with their calls and share of the step's total.

--kernels fast reference (or any GTSCALE_KERNELS values, models/kernels) times each row once per
kernel selection, side by side, and prints each selection's throughput against the first's.

For ET and MNA-GT a plain implementation written the obvious way (bench/reference.py: ET's
update by autograd of the energy, MNA-GT's Âᵏ X by dense products) runs in the same invocation on
the same batch with the same parameters, and the ratios are printed.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import torch

from gtscale.bench.molecules import PCQM4MV2_MAX_ATOMS, molecule_batch, sample_molecules
from gtscale.bench.report import claim_json, claim_markdown, write_json, write_markdown
from gtscale.bench.step import adamw, device_named
from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.errors import UserError
from gtscale.models import build_head, build_model, kernels, load_model_config, parse_model_config
from gtscale.train.compiled import prepare_inductor, private_cache_dir
from gtscale.train.config import CompileConfig

#: Dense peak FLOP/s by GPU name and precision (fp32 = no TF32, PyTorch's default for matmul).
PEAK_FLOPS = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
}

#: Kernels (operators on the CPU) per row of --profile's table.
PROFILE_ROWS = 15

#: Inductor's cache for --compile: training's compile.cache_dir.
DEFAULT_COMPILE_CACHE = CompileConfig().cache_dir


# --- the generated graph ---------------------------------------------------------------------

def generated_graph(nodes: int, edges: int, graph_nodes: int | None, typed, seed: int) -> EdgeBatch:
    """A random graph as an EdgeBatch: uniform random directed edges (within each subgraph of
    `graph_nodes` nodes when given), the node inputs the model reads, 5 % anomalous labels."""
    gen = torch.Generator().manual_seed(seed)
    per = graph_nodes or nodes
    num_graphs = -(-nodes // per)
    graph_index = torch.arange(nodes) // per
    src = torch.randint(0, nodes, (edges,), generator=gen)
    start = graph_index[src] * per
    size = torch.clamp(nodes - start, max=per)
    dst = start + (torch.rand(edges, generator=gen) * size).long()
    vocab = getattr(typed, "node_vocab", [])
    node_feat = torch.stack([torch.randint(1, v + 1, (nodes,), generator=gen) for v in vocab], 1) if vocab else None
    in_features = getattr(typed, "node_float_dim", 0)
    node_feat_float = torch.randn(nodes, in_features, generator=gen) if in_features else None
    labels = (torch.rand(nodes, generator=gen) < 0.05).float()
    return EdgeBatch(edge_index=torch.stack([src, dst]), graph_index=graph_index, num_graphs=num_graphs,
                     node_feat=node_feat, node_feat_float=node_feat_float, node_y=labels, node_y_mask=torch.ones(nodes, dtype=torch.bool))


# --- one measurement (in its own process) ------------------------------------------------------

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


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


def measure(cfg: dict, batch: Batch | EdgeBatch, precision: str, steps: int, warmup: int, threads: int,
            device_name: str, seed: int, peak_tflops: float | None, implementation: str = "model", profile_rows: int = 0,
            compile_cache: str | Path = DEFAULT_COMPILE_CACHE) -> dict:
    """Train `steps` timed steps on `batch`; the figures of one precision and implementation
    ("model"; "compiled": the same under torch.compile, fullgraph; "cudagraph": compiled with mode
    reduce-overhead, whose steps replay CUDA graphs; or "plain": bench/reference.py's obvious version
    with the same parameters). compile_s: the first step's time beyond a timed
    step's (tracing and code generation; the rest of the warmup is untimed; compile_cache: inductor's
    cache). profile_rows > 0: one more step under torch.profiler after the timed ones, and its
    profile_rows costliest entries (profile_step)."""
    from torch.utils.flop_counter import FlopCounterMode

    from gtscale.bench.reference import plain_version
    from gtscale.models.et import anomaly_loss

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = torch.device(device_name)
    batch = batch.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = _rss_bytes()
    model = build_model(cfg)
    if implementation == "plain":
        model = plain_version(model)
    model = model.to(device).train()
    node_task = isinstance(batch, EdgeBatch)
    head = build_head({"kind": "node", "num_outputs": 1} if node_task else _graph_head(cfg), model).to(device)
    params = list({id(p): p for p in [*model.parameters(), *head.parameters()]}.values())
    optimizer, optimizer_name = adamw(params)
    target = torch.randn(batch.num_graphs, head.cfg.num_outputs, device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def eager(batch):
        return head(model(batch))

    # FLOPs are counted on the eager forward: a counting dispatch mode and a compiled graph exclude each other
    compiled = eager
    is_compiled = implementation in ("compiled", "cudagraph")
    if is_compiled:
        prepare_inductor(compile_cache, device.type)  # as training compiles: the private cache, the CPU workaround
        if profile_rows and device.type == "cpu":
            # Each generated C++ kernel records itself, so that the profile names the fused kernels
            # instead of one opaque "CompiledFxGraph" row (a codegen option: part of the cache key).
            torch._inductor.config.cpp.enable_kernel_profile = True
        compiled = torch.compile(eager, fullgraph=True, mode="reduce-overhead" if implementation == "cudagraph" else "default")

    def step(forward=compiled) -> None:
        if implementation == "cudagraph" and forward is compiled:
            # a new step: the previous step's graph outputs (loss, activations) may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            scores = forward(batch)
        if node_task:
            loss = anomaly_loss(scores[:, 0], batch.node_y)
        else:
            loss = (scores.float() - target).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    first = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - first
    for _ in range(max(warmup - 1, 0)):
        step()
    with FlopCounterMode(display=False) as counter:
        step(eager)
    flops = counter.get_total_flops()
    times, cpu_times = [], []
    for _ in range(steps):
        sync()
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        sync()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    seconds = statistics.median(times)
    if device.type == "cuda":
        peak_mem = torch.cuda.max_memory_allocated(device)
    else:
        peak_mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    achieved = flops / seconds
    peak = _peak_flops(device, precision, peak_tflops)
    num_nodes = batch.num_nodes if node_task else int(batch.node_mask.sum())
    result = {
        "precision": precision,
        "implementation": implementation,
        "graphs_per_s": batch.num_graphs / seconds,
        "nodes_per_s": num_nodes / seconds,
        "step_ms": seconds * 1e3,
        "step_ms_min": min(times) * 1e3,
        "step_cpu_ms": statistics.median(cpu_times) * 1e3,
        "peak_mem_mb": peak_mem / 2**20,
        "gflop_per_step": flops / 1e9,
        "achieved_tflops": achieved / 1e12,
        "mfu": achieved / peak if peak else None,
        "parameters": sum(p.numel() for p in params),
        "optimizer": optimizer_name,
        "compile_s": max(first - seconds, 0.0) if is_compiled else None,
    }
    if profile_rows:
        result["profile"] = profile_step(lambda: (step(), sync()), device, profile_rows)
    return result


def measure_with_kernels(selection: str, *args) -> dict:
    """`measure(*args)` with the fast kernels `selection` names (models/kernels), recorded in the row."""
    with kernels.using(selection):
        return {**measure(*args), "kernels": selection}


def profile_step(step, device: torch.device, rows: int = PROFILE_ROWS) -> dict:
    """Run `step` once under torch.profiler: the `rows` entries of most self time, on a GPU
    its kernels (and copies) by self CUDA time, on a CPU its operators by self CPU time; `share`
    is a fraction of the step's total (the sum over all its kernels or operators)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    cuda = device.type == "cuda"
    with profiler(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
    if cuda:
        # Kernels only: an operator's self CUDA time is its kernels' time counted a second time.
        events = [e for e in prof.key_averages() if e.device_type != DeviceType.CPU]
        self_us = [e.self_device_time_total for e in events]
    else:
        events = list(prof.key_averages())
        self_us = [e.self_cpu_time_total for e in events]
    total = sum(self_us) or 1.0
    top = sorted(zip(self_us, events), key=lambda pair: -pair[0])[:rows]
    return {
        "time": "CUDA" if cuda else "CPU",
        "entries": "kernels" if cuda else "operators",
        "calls": sum(e.count for e in events),
        "total_ms": total / 1e3,
        "rows": [{"name": e.key, "calls": e.count, "self_ms": us / 1e3, "share": us / total} for us, e in top],
    }


def profile_markdown(setup: dict, results: list[dict]) -> str:
    """--profile's report: one table per profiled row."""
    what = f"batch {setup['batch_size']} NCI molecules, padded N = {setup['padded_nodes']}" if setup["graph"] == "molecules" else \
        f"generated graph, {setup['nodes']:,} nodes, {setup['edges']:,} edges"
    lines = [f"# Profile of one training step: {setup['model']}", "",
             f"`gtscale bench model --profile`: {what}; device {setup['device']}; torch {setup['torch']}. "
             "One step (forward, backward, AdamW) after the timed ones, under torch.profiler.", ""]
    for r in results:
        prof = r.get("profile")
        if prof is None:
            continue
        selection = f" · kernels {r['kernels']}" if len(setup.get("kernels", [])) > 1 else ""
        lines += [f"## {setup['model']} · {r['precision']} · {r['implementation']}{selection} ({r['graphs_per_s']:,.1f} graphs/s timed)", "",
                  f"{prof['calls']:,} {prof['entries'][:-1]} calls, {prof['total_ms']:,.2f} ms of self {prof['time']} time in all; "
                  f"the {len(prof['rows'])} {prof['entries']} of most self {prof['time']} time:", "",
                  f"| # | {prof['entries'][:-1]} | calls | self ms | % of step |", "|---:|---|---:|---:|---:|"]
        if not prof["rows"]:
            lines.append(f"| | (none recorded: the profiler saw no {prof['time']} activity) | | | |")
        for i, row in enumerate(prof["rows"], 1):
            name = row["name"] if len(row["name"]) <= 100 else row["name"][:99] + "…"
            lines.append(f"| {i} | `{name.replace('|', '¦').replace('`', '')}` | {row['calls']:,} | {row['self_ms']:,.3f} | {100 * row['share']:.1f} |")
        lines.append("")
    return "\n".join(lines)


# --- the command ---------------------------------------------------------------------------------

def _print(setup: dict, results: list[dict]) -> None:
    print("model config:")
    for key, value in setup["model_config"].items():
        print(f"  {key}: {value}")
    if setup["graph"] == "generated":
        print(
            f"batch: generated graph, {setup['nodes']:,} nodes, {setup['edges']:,} random edges, "
            f"{setup['num_graphs']} graph(s); seed {setup['seed']}"
        )
    else:
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
    width = max(len("kernels"), *(len(r["kernels"]) for r in results)) + 1
    print(f"{'precision':<10}{'impl':<11}{'kernels':<{width}}{'graphs/s':>10}{'nodes/s':>11}{'step ms':>10}{'min ms':>9}{'CPU ms':>9}"
          f"{'peak MiB':>10}{'GFLOP/step':>12}{'TFLOP/s':>9}{'MFU':>7}{'compile s':>10}")
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        print(
            f"{r['precision']:<10}{r['implementation']:<11}{r['kernels']:<{width}}"
            f"{r['graphs_per_s']:>10.1f}{r['nodes_per_s']:>11.0f}{r['step_ms']:>10.1f}"
            f"{r['step_ms_min']:>9.1f}{r['step_cpu_ms']:>9.1f}{r['peak_mem_mb']:>10.0f}{r['gflop_per_step']:>12.1f}{r['achieved_tflops']:>9.3f}{mfu:>7}"
            f"{'' if r['compile_s'] is None else format(r['compile_s'], '.1f'):>10}"
        )

    def label(ratio: dict) -> str:  # the kernel selection named only when there are several
        return ratio["precision"] + (f" ({ratio['kernels']})" if len(setup["kernels"]) > 1 else "")

    for ratio in setup.get("compile_ratios", []):
        impl = ratio["implementation"]
        print(f"{label(ratio)}: {impl} / eager throughput {ratio['speedup']:.2f}x, peak memory eager / {impl} {ratio['memory_saving']:.2f}x")
    for ratio in setup.get("ratios", []):
        print(f"{label(ratio)}: model / plain throughput {ratio['speedup']:.2f}x, peak memory plain / model {ratio['memory_saving']:.2f}x")
    for ratio in setup.get("kernel_ratios", []):
        print(f"{ratio['precision']} {ratio['implementation']}: kernels {ratio['kernels']} / {ratio['against']} throughput {ratio['speedup']:.2f}x")


def _has_plain(cfg: dict) -> bool:
    return cfg.get("name") in ("et", "mnagt")


def bench_model(*, model: str = "egt-small", batch_size: int = 32, precisions: list[str] = ("fp32", "bf16"), steps: int = 10,
                warmup: int = 3, pad_to: int | None = None, threads: int = 1, device: str = "auto", checkpointing: bool = False,
                seed: int = 0, peak_tflops: float | None = None, json_path: Path | None = None, graph: str = "auto",
                nodes: int = 50_000, edges: int = 500_000, graph_nodes: int = 1000, reference: bool = True,
                kernel_selections: list[str] | None = None, compile: bool = False, cuda_graphs: bool = False,
                profile: Path | None = None, profile_rows: int = PROFILE_ROWS, compile_cache: Path = Path(DEFAULT_COMPILE_CACHE)) -> int:
    """Time training steps of `model` (module docstring): one row per precision × implementation (model,
    compiled, cudagraph, plain unless not `reference`) × kernel selection, each in a fresh process;
    printed, and written to `json_path` and `profile` when given."""
    if batch_size < 1 or steps < 1 or warmup < 0 or threads < 1 or nodes < 1 or edges < 0 or graph_nodes < 1 \
            or profile_rows < 1:
        raise UserError("--batch-size, --steps, --threads, --nodes, --graph-nodes and --profile-rows must be positive, --warmup and --edges >= 0")
    if compile or cuda_graphs:
        private_cache_dir(compile_cache)  # refused here, in one line, rather than in the row's process
    selections = kernel_selections or [os.environ.get("GTSCALE_KERNELS", "fast")]
    for selection in selections:
        kernels.parse(selection)  # refused here, in one line, rather than in the row's process
    claim_json(json_path)
    claim_markdown(profile, "model", "--profile")
    cfg = load_model_config(model)
    typed = parse_model_config(cfg)
    if checkpointing:
        cfg["activation_checkpointing"] = True
    device = device_named(device)
    if cuda_graphs and not device.startswith("cuda"):
        raise UserError(f"--cuda-graphs: CUDA graphs need a CUDA device, and --device is {device}")
    graph_kind = graph
    if graph_kind == "auto":
        graph_kind = "generated" if getattr(typed, "form", None) == "sparse" else "molecules"
    if graph_kind == "generated" and not (cfg["name"] == "mnagt" or getattr(typed, "form", None) == "sparse"):
        raise UserError(f"--graph generated: {model} is a dense model (use the sparse ET or MNA-GT)")
    setup = {
        "model": str(model),
        "model_config": {k: v for k, v in cfg.items() if k != "head"} | {"head": _graph_head(cfg)},
        "graph": graph_kind,
        "seed": seed,
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu ({platform.processor() or platform.machine()})",
        "threads": threads,
        "torch": torch.__version__,
        "steps": steps,
        "warmup": warmup,
        "checkpointing": checkpointing,
        "kernels": selections,
        "load_average_before": os.getloadavg()[0],
    }
    if graph_kind == "generated":
        batch = generated_graph(nodes, edges, graph_nodes if cfg["name"] == "mnagt" else None, typed, seed)
        setup |= {"nodes": nodes, "edges": edges, "num_graphs": batch.num_graphs}
    else:
        smiles = sample_molecules(batch_size, seed, pad_to or PCQM4MV2_MAX_ATOMS)
        batch = molecule_batch(smiles, pad_to, getattr(typed, "svd_rank", 0), getattr(typed, "multi_hop_max_dist", 0), getattr(typed, "lap_k", 0))
        atoms = batch.node_mask.sum(dim=1)
        setup |= {
            "batch_size": batch_size,
            "padded_nodes": batch.max_graph_nodes,
            "atoms_mean": atoms.float().mean().item(),
            "atoms_max": int(atoms.max()),
        }
    implementations = (["model"] + (["compiled"] if compile else []) + (["cudagraph"] if cuda_graphs else [])
                       + (["plain"] if _has_plain(cfg) and reference else []))
    context = multiprocessing.get_context("spawn")
    results = []
    for precision in precisions:
        for implementation in implementations:
            for selection in selections:  # innermost: the selections of a row run one after the other
                with context.Pool(1) as pool:
                    results.append(pool.apply(measure_with_kernels, (
                        selection, cfg, batch, precision, steps, warmup, threads, device, seed, peak_tflops,
                        implementation, profile_rows if profile is not None else 0, compile_cache)))
                    # the worker ends on its own before the with-block's terminate: a terminated worker
                    # leaves the semaphores of inductor's compile workers to the resource tracker's warning
                    pool.close()
                    pool.join()
    by_key = {(r["precision"], r["implementation"], r["kernels"]): r for r in results}
    setup["ratios"] = [
        {
            "precision": p,
            "kernels": k,
            "speedup": by_key[(p, "model", k)]["nodes_per_s"] / by_key[(p, "plain", k)]["nodes_per_s"],
            "memory_saving": by_key[(p, "plain", k)]["peak_mem_mb"] / max(by_key[(p, "model", k)]["peak_mem_mb"], 1e-9),
        }
        for p in precisions for k in selections if (p, "plain", k) in by_key
    ]
    setup["compile_ratios"] = [
        {
            "precision": p,
            "implementation": impl,
            "kernels": k,
            "speedup": by_key[(p, impl, k)]["nodes_per_s"] / by_key[(p, "model", k)]["nodes_per_s"],
            "memory_saving": by_key[(p, "model", k)]["peak_mem_mb"] / max(by_key[(p, impl, k)]["peak_mem_mb"], 1e-9),
        }
        for p in precisions for impl in ("compiled", "cudagraph") for k in selections if (p, impl, k) in by_key
    ]
    setup["kernel_ratios"] = [
        {
            "precision": p,
            "implementation": impl,
            "kernels": k,
            "against": selections[0],
            "speedup": by_key[(p, impl, k)]["nodes_per_s"] / by_key[(p, impl, selections[0])]["nodes_per_s"],
        }
        for p in precisions for impl in implementations for k in selections[1:]
    ]
    setup["load_average_after"] = os.getloadavg()[0]
    _print(setup, results)
    write_json(json_path, {"setup": setup, "results": results}, "model", indent=2)
    if profile is not None:
        write_markdown(profile, profile_markdown(setup, results), "model", "--profile")
        print(f"profile of one step per row: {profile}")
    return 0
