"""`gtscale graph build {dgl,mat,plain,synthetic} --input PATH --out STORE` and `gtscale graph info STORE`."""

from __future__ import annotations

import argparse

from gtscale.errors import UserError
from gtscale.graphs.store import FEATURE_DTYPES, STORE_MARKERS, GraphStore, build_store, load_manifest
from gtscale.io import claim_out_dir

SOURCES = ("dgl", "mat", "plain", "synthetic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="build the on-disk CSR store of a graph")
    build.add_argument("source", choices=SOURCES, help="dgl: dgl.save_graphs file; mat: YelpChi/Amazon .mat; plain: folder of .npy; synthetic: generated")
    build.add_argument("--input", help="the DGL file, .mat file or plain folder (not for synthetic)")
    build.add_argument("--out", required=True, help="store folder: new, empty or an earlier store (replaced); anything else is refused")
    build.add_argument("--feature-dtype", default="float32", choices=FEATURE_DTYPES)
    build.add_argument("--relations", default="union", choices=("union", "typed"), help=".mat: one relation, or a per-edge relation bit mask")
    build.add_argument("--nodes", type=int, default=100_000, help="synthetic: number of nodes")
    build.add_argument("--edges", type=int, default=1_000_000, help="synthetic: number of edges drawn (before deduplication)")
    build.add_argument("--seed", type=int, default=0, help="synthetic: seed")
    build.add_argument("--anomaly-ratio", type=float, default=0.03, help="synthetic: share of anomalous nodes")
    build.add_argument("--neighbour-signal", type=float, default=None, metavar="S",
                       help="synthetic: labels from a score whose variance comes a share S in [0, 1] from the mean of the "
                            "neighbours' features, 1 − S from the node's own (default: planted anomalies instead)")
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    info = actions.add_parser("info", help="summarise a built store")
    info.add_argument("store")
    info.add_argument("--verify", action="store_true", help="check every file's sha256 against the manifest")


def make_source(args: argparse.Namespace):
    from gtscale.graphs import sources
    from gtscale.graphs.synthetic import synthetic_source

    if args.source == "synthetic":
        if args.nodes < 2 or args.edges < 1:
            raise UserError("--nodes must be ≥ 2 and --edges ≥ 1")
        if not 0 < args.anomaly_ratio < 1:
            raise UserError(f"--anomaly-ratio must be in (0, 1), got {args.anomaly_ratio}")
        if args.neighbour_signal is not None and not 0 <= args.neighbour_signal <= 1:
            raise UserError(f"--neighbour-signal must be in [0, 1], got {args.neighbour_signal}")
        return synthetic_source(args.nodes, args.edges, args.seed, anomaly_ratio=args.anomaly_ratio, neighbour_signal=args.neighbour_signal)
    if not args.input:
        raise UserError(f"`graph build {args.source}` needs --input")
    if args.source == "dgl":
        return sources.dgl_source(args.input)
    if args.source == "mat":
        return sources.mat_source(args.input, args.relations)
    return sources.plain_source(args.input)


def summary(manifest: dict) -> list[str]:
    labels = manifest["labels"]
    lines = [
        f"graph {manifest['dataset']}  ({manifest['build']['source'].get('source')} source)",
        f"nodes {manifest['num_nodes']:,}  undirected edges {manifest['num_edges']:,}  features {manifest['num_features']} "
        f"({manifest['build']['feature_dtype']})",
        f"input edges {manifest['input_edges']:,}: self-loops removed {manifest['self_loops_removed']:,}, "
        f"duplicates removed {manifest['duplicate_edges_removed']:,}",
        f"labels: anomalous {labels['anomalous']:,}  normal {labels['normal']:,}  unknown {labels['unknown']:,}",
        "masks: " + (", ".join(f"{s} [{k} columns]" for s, k in manifest["masks"].items()) or "none"),
    ]
    if manifest["relations"]:
        lines.append("relations (bit order): " + ", ".join(manifest["relations"]))
    size = sum(f["bytes"] for f in manifest["files"].values())
    lines.append(f"files {len(manifest['files'])}, {size / 2**20:.1f} MiB; built in {manifest['build']['seconds']} s")
    return lines


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        claim_out_dir(args.out, STORE_MARKERS, [args.input])  # before reading a possibly huge input
        manifest = build_store(make_source(args), args.out, args.feature_dtype, progress=not args.quiet, inputs=(args.input,))
        print("\n".join(summary(manifest)))
        return 0
    manifest = load_manifest(args.store)
    print("\n".join(summary(manifest)))
    store = GraphStore.open(args.store)  # the checks every reader makes: file sizes, array shapes, the CSR's ids
    if not args.verify:
        print("store opens (file sizes, shapes and neighbour ids checked); checksums not verified: --verify reads every file")
        return 0
    bad = store.verify()
    if bad:
        raise UserError(f"{args.store}: checksum mismatch in {', '.join(bad)} (rebuild the store)")
    print(f"verified {len(manifest['files'])} files")
    return 0
