"""`gtscale graph build {dgl,mat,plain,synthetic} --input PATH --out STORE` and `gtscale graph info STORE`
(graphs/build.py, graphs/store.py)."""

from __future__ import annotations

import argparse

from gtscale.errors import UserError
from gtscale.graphs.build import SOURCES, build_graph_store, summary
from gtscale.graphs.store import FEATURE_DTYPES, GraphStore, load_manifest

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


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        manifest = build_graph_store(args.source, args.out, args.input, args.feature_dtype, args.relations, args.nodes, args.edges,
                                     args.seed, args.anomaly_ratio, args.neighbour_signal, progress=not args.quiet)
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
