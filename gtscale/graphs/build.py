"""Building a graph store from a source, and its summary (`gtscale graph build {dgl,mat,plain,synthetic}
--input PATH --out STORE`, `gtscale graph info STORE`)."""

from __future__ import annotations

from gtscale.errors import UserError
from gtscale.graphs.store import STORE_MARKERS, build_store
from gtscale.io import claim_out_dir

SOURCES = ("dgl", "mat", "plain", "synthetic")


def make_source(source: str, input: str | None = None, relations: str = "union", nodes: int = 100_000, edges: int = 1_000_000,
                seed: int = 0, anomaly_ratio: float = 0.03, neighbour_signal: float | None = None):
    """The graph source `source` (one of SOURCES) reads: the file or folder `input`, or the
    synthetic graph of `nodes`, `edges`, `seed`, `anomaly_ratio` and `neighbour_signal`."""
    from gtscale.graphs import sources
    from gtscale.graphs.synthetic import synthetic_source

    if source == "synthetic":
        if nodes < 2 or edges < 1:
            raise UserError("--nodes must be ≥ 2 and --edges ≥ 1")
        if not 0 < anomaly_ratio < 1:
            raise UserError(f"--anomaly-ratio must be in (0, 1), got {anomaly_ratio}")
        if neighbour_signal is not None and not 0 <= neighbour_signal <= 1:
            raise UserError(f"--neighbour-signal must be in [0, 1], got {neighbour_signal}")
        return synthetic_source(nodes, edges, seed, anomaly_ratio=anomaly_ratio, neighbour_signal=neighbour_signal)
    if not input:
        raise UserError(f"`graph build {source}` needs --input")
    if source == "dgl":
        return sources.dgl_source(input)
    if source == "mat":
        return sources.mat_source(input, relations)
    return sources.plain_source(input)


def build_graph_store(source: str, out: str, input: str | None = None, feature_dtype: str = "float32", relations: str = "union",
                      nodes: int = 100_000, edges: int = 1_000_000, seed: int = 0, anomaly_ratio: float = 0.03,
                      neighbour_signal: float | None = None, progress: bool = True) -> dict:
    """Build the store of `source` (make_source's options) in `out`, which must be new, empty or an
    earlier store; its manifest."""
    claim_out_dir(out, STORE_MARKERS, [input])  # before reading a possibly huge input
    graph = make_source(source, input, relations, nodes, edges, seed, anomaly_ratio, neighbour_signal)
    return build_store(graph, out, feature_dtype, progress=progress, inputs=(input,))


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
