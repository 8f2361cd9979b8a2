"""`gtscale` command line: every command is declared in this package, one module per command.

Each command module (gtscale/cli/<command>.py, the benchmarks' in gtscale/cli/bench/) defines
``add_arguments(parser)`` and ``run(args) -> int``: it reads the options and calls a library
function with them as keyword parameters. The library (prep, train, experiments, bench, …) never
parses arguments and never imports this package (tests/test_layout.py). Command modules are
imported only when their command runs, so `gtscale inspect` does not pay for importing DeepSpeed.
`python -m gtscale.cli` (what torchrun starts) runs __main__.py.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from gtscale.allocator import keep_freed_memory
from gtscale.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, UserError

#: command → (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "shard": ("gtscale.cli.shard", "convert a dataset into WebDataset shards with precomputed structure"),
    "merge-parts": ("gtscale.cli.merge_parts", "merge the manifests of a sharding run split with --num-parts"),
    "inspect": ("gtscale.cli.inspect_shards", "summarise a shard directory; --verify checks every shard"),
    "model-info": ("gtscale.cli.model_info", "print a model config's architecture summary and parameter count"),
    "train": ("gtscale.cli.train", "train a model with DeepSpeed (start with torchrun, deepspeed or srun)"),
    "export": ("gtscale.cli.export", "consolidated fp32 weights + model config of a run's checkpoint"),
    "plot": ("gtscale.cli.plot", "loss, metric and learning-rate curves of a run to PNG"),
    "graph": ("gtscale.cli.graph", "huge graphs: `graph build {dgl,mat,plain,synthetic}` an on-disk CSR store, `graph info`"),
    "evaluate": ("gtscale.cli.evaluate", "score a split (default test) with a run's best-validation checkpoint"),
    "fit": ("gtscale.cli.fit", "a CSV of molecules and properties (numbers or 0/1 labels) → members fitted, the best chosen on train + valid, tested, exported for predict"),
    "predict": ("gtscale.cli.predict", "predictions of one export (or an ensemble's mean and std) for a CSV of SMILES or a shard folder"),
    "fingerprint": ("gtscale.cli.fingerprint", "an export's pooled graph representation of each molecule of a CSV or a shard folder, to .npy or .csv"),
    "sweep": ("gtscale.cli.sweep", "one run per seed, test metrics at the best checkpoint as mean ± std; --compare sweeps in one table"),
    "moleculeace-table": ("gtscale.cli.moleculeace_table", "ECFP + SVR and gtscale arms over MoleculeACE sets: per-set RMSE / cliff RMSE and their mean, one table"),
    "import-checkpoint": ("gtscale.cli.import_checkpoint", "an authors' Graphormer (fairseq) or EGT checkpoint → a gtscale export"),
}

#: `gtscale <command> <name>` handled by another module than <command>'s own → (module, help)
SUBCOMMANDS: dict[tuple[str, str], tuple[str, str]] = {
    ("baseline", "ecfp"): ("gtscale.cli.baseline_ecfp", "ECFP (Morgan r=2, 2048 bits) + SVR / RF (SVC on 0/1 targets) on a shard folder's split, as a sweep row"),
    ("baseline", "kernel"): ("gtscale.cli.baseline_kernel", "SVR (SVC) on ECFP4 Tanimoto or MinMax + an RBF kernel on a pretrained export's representation, as a sweep row"),
    ("shard", "graph-ego"): ("gtscale.cli.shard_graph_ego", "ego-subgraph shards of each split's target nodes of a graph store"),
    ("graph", "predict"): ("gtscale.cli.graph_predict", "an anomaly score for every node of a graph store, each with all its neighbours"),
}

#: `gtscale bench <name>` → (module, help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "shard": ("gtscale.cli.bench.shard", "featurization + structure + serialization throughput vs smiles2graph"),
    "loader": ("gtscale.cli.bench.loader", "decode + collate graphs/s per worker and padding efficiency"),
    "model": ("gtscale.cli.bench.model", "forward+backward graphs/s and peak memory of a model"),
    "train": ("gtscale.cli.bench.train", "training-loop graphs/s against the model alone on pre-collated batches"),
    "fit": ("gtscale.cli.bench.fit", "gtscale fit's time, memory and test metric by molecules × target columns (labelled MOSES)"),
    "graph": ("gtscale.cli.bench.graph", "huge-graph CSR build, store open, ego/induced sampling vs scipy + Python BFS"),
    "graph-sampling": ("gtscale.cli.bench.graph_sampling",
                       "features-only, induced and fan-out training on neighbour-dependent labels: test AUROC sampled and full, targets/s, memory"),
}


def _build_parser(module_name: str, prog: str, help_text: str) -> tuple[argparse.ArgumentParser, object]:
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=prog, description=help_text)
    module.add_arguments(parser)
    return parser, module


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Options and positionals in any order (`gtscale sweep CONFIG --label x key=value`), except in
    commands with subcommands, which argparse reads in order only. argparse exits 2 on a bad
    option, naming it."""
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        return parser.parse_args(argv)
    return parser.parse_intermixed_args(argv)


def _usage() -> str:
    lines = ["usage: gtscale <command> [options]", "", "commands:"]
    lines += [f"  {name:<12} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += [f"  {c} {name:<6} {help_text}" for (c, name), (_, help_text) in SUBCOMMANDS.items()]
    lines += [f"  bench {name:<6} {help_text}" for name, (_, help_text) in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else EXIT_USER_ERROR
    command, rest = argv[0], argv[1:]
    if command == "bench":
        if not rest or rest[0] not in BENCHMARKS:
            print(f"gtscale bench: error: choose one of {', '.join(BENCHMARKS)}", file=sys.stderr)
            return EXIT_USER_ERROR
        module_name, help_text = BENCHMARKS[rest[0]]
        prog, rest = f"gtscale bench {rest[0]}", rest[1:]
    elif rest and (command, rest[0]) in SUBCOMMANDS:
        module_name, help_text = SUBCOMMANDS[(command, rest[0])]
        prog, rest = f"gtscale {command} {rest[0]}", rest[1:]
    elif command in COMMANDS:
        module_name, help_text = COMMANDS[command]
        prog = f"gtscale {command}"
    else:
        print(f"gtscale: error: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        parser, module = _build_parser(module_name, prog, help_text)
        args = parse(parser, rest)
        keep_freed_memory()  # before the command allocates: a CPU step reuses what the last one freed
        return int(module.run(args) or 0)
    except UserError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:  # Ctrl-C: what was written is whole (atomic writes), so one line says so
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED

