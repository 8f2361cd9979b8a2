"""The on-disk graph store: a symmetric CSR built out of core, node arrays, a manifest written last.

Layout of a store folder (all .npy, memory-mapped for reading, so that every loader worker and
rank on a machine shares one copy through the page cache):

    indptr.npy     int64 [N+1]
    indices.npy    int32 [nnz]    neighbours per row, sorted, no self-loops, no repeats; symmetric
    relations.npy  uint8 [nnz]    (typed .mat sources) bit r: the edge belongs to relation r
    features.npy   float32/float16 [N, F]
    labels.npy     int8 [N]       1 anomalous, 0 normal, −1 unknown
    mask_<split>.npy bool [N, K]  stored split masks (GADBench: K = 20 columns)
    graph.json     counts, sha256 of every file, the build's parameters; written last

The build (never the whole edge list in RAM as Python objects): pass 1 counts degrees block by
block, validating node ids; pass 2 scatters each block into its rows (a counting sort into a
memory-mapped scratch file); then every row is sorted and deduplicated in place and the rows are
compacted into indices.npy. The build runs in a sibling folder with graph.json written last and
replaces the store only when finished, so a half-built store never opens and bad input leaves an
existing store as it was; a rerun after an interruption rebuilds from scratch.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gtscale.errors import UserError
from gtscale.format.manifest import read_manifest_file
from gtscale.graphs import validate
from gtscale.graphs.csr_check import check_csr, mark_checked
from gtscale.graphs.csr_build import compact_rows, dedupe_rows, scatter_symmetric
from gtscale.graphs.sources import GraphSource
from gtscale.io import atomic_write_text, claim_out_dir, sha256_file

MANIFEST = "graph.json"
STORE_FORMAT = "gtscale-graph"
#: What marks a folder as a graph store gtscale built (gtscale.io.claim_out_dir).
STORE_MARKERS = {MANIFEST: lambda manifest: manifest.get("format") == STORE_FORMAT}
STORE_VERSION = 1
FEATURE_DTYPES = ("float32", "float16")


def _count_degrees(source: GraphSource, progress: bool) -> tuple[np.ndarray, dict]:
    n = source.num_nodes
    degree = np.zeros(n, np.int64)
    counts = {"input_edges": 0, "self_loops_removed": 0}
    for start, src, dst, _ in tqdm(source.edge_blocks(), desc="count degrees", unit="block", disable=not progress):
        validate.check_edge_ids(src, dst, n, start, source.files.get("edges", "edges"))
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)  # uint64 ids: in range now, and bincount refuses them
        keep = src != dst
        counts["input_edges"] += len(src)
        counts["self_loops_removed"] += int(len(src) - keep.sum())
        degree += np.bincount(src[keep], minlength=n)
        degree += np.bincount(dst[keep], minlength=n)
    return degree, counts


def _build_csr(source: GraphSource, out: Path, progress: bool) -> dict:
    n, typed = source.num_nodes, bool(source.relations)
    degree, counts = _count_degrees(source, progress)
    raw_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(degree, out=raw_indptr[1:])
    del degree
    total = int(raw_indptr[-1])
    scratch = out / "indices.scratch"
    raw = np.memmap(scratch, np.int32, "w+", shape=(max(total, 1),))
    raw_rel = np.memmap(out / "relations.scratch", np.uint8, "w+", shape=(max(total, 1),)) if typed else np.zeros(1, np.uint8)
    fill = raw_indptr[:-1].copy()
    no_bits = np.zeros(1, np.uint8)
    for _, src, dst, bits in tqdm(source.edge_blocks(), desc="scatter edges", unit="block", disable=not progress):
        keep = src != dst
        scatter_symmetric(src[keep].astype(np.int64), dst[keep].astype(np.int64), bits[keep] if typed else no_bits, fill, raw, raw_rel, typed)
    del fill
    new_degree = np.empty(n, np.int64)
    dedupe_rows(raw_indptr, raw, raw_rel, typed, new_degree)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(new_degree, out=indptr[1:])
    del new_degree
    nnz = int(indptr[-1])
    np.save(out / "indptr.npy", indptr)
    indices = np.lib.format.open_memmap(out / "indices.npy", "w+", np.int32, (nnz,))
    compact_rows(raw_indptr, raw, indptr, indices)
    indices.flush()
    if typed:
        relations = np.lib.format.open_memmap(out / "relations.npy", "w+", np.uint8, (nnz,))
        compact_rows(raw_indptr, raw_rel, indptr, relations)
        relations.flush()
        del relations
    del raw, raw_rel, indices
    scratch.unlink()
    (out / "relations.scratch").unlink(missing_ok=True)
    undirected = nnz // 2
    counts |= {"num_edges": undirected, "nnz": nnz,
               "duplicate_edges_removed": counts["input_edges"] - counts["self_loops_removed"] - undirected}
    return counts


def _write_node_arrays(source: GraphSource, out: Path, feature_dtype: str) -> np.ndarray:
    """features.npy, labels.npy and the masks; returns the labels."""
    n = source.num_nodes
    features = np.lib.format.open_memmap(out / "features.npy", "w+", np.dtype(feature_dtype), (n, source.num_features))
    rows = 0
    for start, block in source.feature_blocks():
        validate.check_features(block, start, source.files.get("features", "features"))
        features[start : start + len(block)] = block
        rows += len(block)
    features.flush()
    del features
    if rows != n:
        raise UserError(f"{source.files.get('features', 'features')}: {rows} feature rows for {n} nodes")
    labels = source.labels
    if source.graph_labels is not None:  # computed from the CSR and features just written
        arrays = (np.load(out / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in ("indptr", "indices", "features"))
        labels = source.graph_labels(*arrays)
    labels = np.asarray(labels).astype(np.int8)
    np.save(out / "labels.npy", labels)
    for split, mask in source.masks.items():
        np.save(out / f"mask_{split}.npy", np.asarray(mask, bool))
    return labels


def _store_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.suffix == ".npy")


def _replace_store(built: Path, out: Path) -> None:
    """Move a finished build into place. The old store is first renamed aside, so a crash in between
    leaves the old store, the new one, or no `out` (and a rebuild) — never a folder without its
    graph.json that the next build would have to refuse as foreign."""
    old = out.parent / f".{out.name}.old"
    if old.exists():
        shutil.rmtree(old)  # set aside by an earlier replacement that crashed before removing it
    if out.exists():
        claim_out_dir(out, STORE_MARKERS)  # the folder may have changed during the build
        out.rename(old)
    built.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def build_store(source: GraphSource, out: str | Path, feature_dtype: str = "float32", progress: bool = True, inputs: tuple = ()) -> dict:
    """Build (or rebuild) the store of `source` in folder `out`; returns its manifest.

    `out` must be new, empty or an earlier store, and not be or lie in one of `inputs`
    (gtscale.io.claim_out_dir). The build happens in a sibling folder `.<name>.building` that
    replaces `out` only when finished: bad input found halfway (exit 2) leaves an existing store
    untouched and nothing that opens."""
    if feature_dtype not in FEATURE_DTYPES:
        raise UserError(f"feature dtype {feature_dtype!r}: choose one of {', '.join(FEATURE_DTYPES)}")
    if (source.labels is None) == (source.graph_labels is None):
        raise ValueError("a GraphSource has labels or graph_labels, exactly one")
    out = claim_out_dir(out, STORE_MARKERS, inputs)
    work = out.parent / f".{out.name}.building"
    if work.exists():
        shutil.rmtree(work)  # an interrupted earlier build: start over
    work.mkdir(parents=True)
    began = time.perf_counter()
    try:
        counts = _build_csr(source, work, progress)
        labels = _write_node_arrays(source, work, feature_dtype)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "dataset": source.name,
        "num_nodes": source.num_nodes,
        "num_features": source.num_features,
        **counts,
        "labels": {"anomalous": int((labels == 1).sum()), "normal": int((labels == 0).sum()), "unknown": int((labels == -1).sum())},
        "masks": {split: int(mask.reshape(source.num_nodes, -1).shape[1]) for split, mask in source.masks.items()},
        "relations": source.relations,
        "build": {"feature_dtype": feature_dtype, "symmetrised": True, "self_loops": "removed", "duplicates": "removed",
                  "seconds": round(time.perf_counter() - began, 2), "source": source.params},
        "files": {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in _store_files(work)},
    }
    atomic_write_text(work / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    _replace_store(work, out)
    return manifest


def load_manifest(path: str | Path) -> dict:
    path = Path(path)
    file = path / MANIFEST
    manifest = read_manifest_file(file, f"{path}: not a finished graph store (no {MANIFEST}); build it with `gtscale graph build`")
    if manifest.get("format") != STORE_FORMAT or manifest.get("version") != STORE_VERSION:
        raise UserError(f"{file}: not a version-{STORE_VERSION} {STORE_FORMAT} manifest")
    return manifest


#: (store folder, nodes, (inode, size, mtime) of indptr.npy and indices.npy) of the stores whose
#: CSR this process has checked: the loaders reopen a store in every worker and for every split.
_CSR_CHECKED: set[tuple] = set()


@dataclass
class GraphStore:
    """A built store, memory-mapped: opening reads no array data."""

    path: Path
    manifest: dict
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    masks: dict[str, np.ndarray]
    relations: np.ndarray | None

    @property
    def num_nodes(self) -> int:
        return self.manifest["num_nodes"]

    @property
    def num_edges(self) -> int:
        return self.manifest["num_edges"]

    def neighbours(self, node: int) -> np.ndarray:
        return self.indices[self.indptr[node] : self.indptr[node + 1]]

    @classmethod
    def open(cls, path: str | Path) -> GraphStore:
        path = Path(path)
        manifest = load_manifest(path)

        def load(name: str) -> np.ndarray:
            file = path / name
            if name not in manifest["files"] or not file.is_file():
                raise UserError(f"{file}: missing from the store (rebuild it)")
            if file.stat().st_size != manifest["files"][name]["bytes"]:
                raise UserError(f"{file}: {file.stat().st_size} bytes, the manifest says {manifest['files'][name]['bytes']} (rebuild the store)")
            return np.load(file, mmap_mode="r", allow_pickle=False)

        masks = {split: load(f"mask_{split}.npy") for split in manifest["masks"]}
        relations = load("relations.npy") if manifest["relations"] else None
        store = cls(path, manifest, load("indptr.npy"), load("indices.npy"), load("features.npy"), load("labels.npy"), masks, relations)
        store._check()
        return store

    def _check(self) -> None:
        """What the samplers' compiled kernels and the loaders' indexing rely on (csr_check.py), so
        that a corrupt store is one line at open, never a segfault later. The CSR pass reads all
        of indices.npy once; a process that reopens the same unchanged files skips it."""
        n = self.num_nodes
        rows = {"features.npy": self.features, "labels.npy": self.labels, **{f"mask_{s}.npy": m for s, m in self.masks.items()}}
        for name, array in rows.items():
            if array.ndim < 1 or array.shape[0] != n or (name == "labels.npy" and array.ndim != 1):
                raise UserError(f"{self.path / name}: shape {list(array.shape)} does not match the store's {n} nodes (rebuild the store)")
        if self.relations is not None and self.relations.shape != self.indices.shape:
            raise UserError(f"{self.path / 'relations.npy'}: shape {list(self.relations.shape)}, indices.npy has {list(self.indices.shape)} (rebuild the store)")
        identity = tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in ((self.path / f).stat() for f in ("indptr.npy", "indices.npy")))
        key = (str(self.path.resolve()), n, identity)
        if key not in _CSR_CHECKED:
            check_csr(self.indptr, self.indices, n, self.path / "indptr.npy", self.path / "indices.npy")
            _CSR_CHECKED.add(key)
        mark_checked(self.indptr, self.indices)

    def verify(self) -> list[str]:
        """Files whose sha256 differs from the manifest's."""
        return [name for name, info in self.manifest["files"].items() if sha256_file(self.path / name) != info["sha256"]]
