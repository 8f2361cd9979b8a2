"""`gtscale bench model`: forward+backward graphs/s and peak memory of a model (bench/model.py;
--authors: against the authors' code, bench/authors.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from gtscale.bench.model import DEFAULT_COMPILE_CACHE, PROFILE_ROWS, bench_model
from gtscale.models import kernels


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
    parser.add_argument("--graph", choices=("auto", "molecules", "generated"), default="auto",
                        help="molecules (dense batch) or a generated large graph; auto = generated for sparse ET")
    parser.add_argument("--nodes", type=int, default=50_000, help="generated graph: nodes")
    parser.add_argument("--edges", type=int, default=500_000, help="generated graph: directed edges")
    parser.add_argument("--graph-nodes", type=int, default=1000, help="generated graph for MNA-GT: nodes per (ego) subgraph")
    parser.add_argument("--no-reference", action="store_true", help="skip the plain implementation (ET, MNA-GT)")
    parser.add_argument("--authors", type=Path, default=None, metavar="PATH",
                        help="time against the authors' code in this checkout (egt_pytorch or Graphormer; bench/authors.py)")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="SPEC",
                        help="time every row with each of these kernel selections, side by side: fast, reference or a "
                             f"comma-separated list of {', '.join(kernels.KERNELS)} (default: GTSCALE_KERNELS, else fast)")
    parser.add_argument("--compile", action="store_true", help="also time the model under torch.compile (fullgraph), side by side with eager")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="also time it compiled with CUDA graphs (mode reduce-overhead: the step replays captured kernels); CUDA only")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE.md",
                        help="profile one more step per row (torch.profiler) and write its costliest kernels here (--profile-rows)")
    parser.add_argument("--profile-rows", type=int, default=PROFILE_ROWS, metavar="N",
                        help=f"kernels (CPU: operators) per row of --profile's table (default {PROFILE_ROWS})")
    parser.add_argument("--compile-cache", type=Path, default=Path(DEFAULT_COMPILE_CACHE), metavar="DIR",
                        help="inductor's cache for --compile (default: training's compile.cache_dir; it must be private to you)")


def run(args: argparse.Namespace) -> int:
    if args.authors is not None:
        from gtscale.bench.authors import bench_authors

        return bench_authors(args.authors, model=args.model, batch_size=args.batch_size, precisions=args.precision, steps=args.steps,
                             warmup=args.warmup, pad_to=args.pad_to, threads=args.threads, device=args.device, seed=args.seed,
                             json_path=args.json)
    return bench_model(model=args.model, batch_size=args.batch_size, precisions=args.precision, steps=args.steps, warmup=args.warmup,
                       pad_to=args.pad_to, threads=args.threads, device=args.device, checkpointing=args.checkpointing, seed=args.seed,
                       peak_tflops=args.peak_tflops, json_path=args.json, graph=args.graph, nodes=args.nodes, edges=args.edges,
                       graph_nodes=args.graph_nodes, reference=not args.no_reference, kernel_selections=args.kernels,
                       compile=args.compile, cuda_graphs=args.cuda_graphs, profile=args.profile, profile_rows=args.profile_rows,
                       compile_cache=args.compile_cache)
