"""Native reader of DGL's binary graph files (`dgl.save_graphs`, format version 2), numpy only.

DGL is not a dependency: GADBench and BWGNN distribute T-Social and T-Finance in this format, and
the layout is small enough to read directly, memory-mapped. It follows DGL 1.x's serializer
(src/graph/serialize/heterograph_serialize.cc and heterograph_data.h, src/graph/heterograph.cc,
unit_graph.cc, immutable_graph.cc, include/dgl/aten/coo.h and csr.h, the runtime NDArray save,
dmlc-core's serializer); everything is little-endian:

    file        := u64 magic 0xDD2E4FF046B4A13F, u64 version (2), u64 graph type (2: heterograph),
                   u64 num_graphs, zero padding to byte 4096,
                   u64 gdata_start, labels: vector<(string, NDArray)>,
                   HeteroGraphData × num_graphs, vector<u64> graph offsets, u64 size of that vector
    HeteroGraphData := HeteroGraph, vector<vector<(string, NDArray)>> node tensors per node type,
                   the same for edge types, vector<string> node type names, vector<string> edge types
    HeteroGraph := u64 magic 0xDD589FBE35224ABF, ImmutableGraph (the metagraph),
                   vector<UnitGraph> relation graphs, vector<i64> nodes per type
    ImmutableGraph := u64 magic 0xDD3C5FFE20046ABF, CSRMatrix
    UnitGraph   := u64 magic 0xDD2E60F0F6B4A127, i64 saved formats, i64 allowed formats
                   (both with bit 32 set; COO 1, CSR 2, CSC 4), then per saved format in the order
                   COO, CSR, CSC: ImmutableGraph (the unit metagraph) + COOMatrix or CSRMatrix
    COOMatrix   := u64 magic 0xDD61FFD305DFF127, i64 num_cols, i64 num_rows, NDArray row, col, data,
                   bool row_sorted, bool col_sorted
    CSRMatrix   := u64 magic 0xDD6CD31205DFF127, i64 num_cols, i64 num_rows, NDArray indptr,
                   indices, data, bool sorted
    NDArray     := u64 magic 0xDD5E40F096B4A13F, u64 reserved, i32 device type, i32 device id,
                   i32 ndim, u8 type code, u8 bits, u16 lanes, i64 shape × ndim, i64 byte size, bytes
    vector<T>   := u64 length, elements;  string := u64 length, bytes;  bool := 1 byte

CSR rows are sources (out-edges), CSC rows destinations (in-edges); an empty `data` array means
edge ids 0..E−1 in stored order, otherwise data[k] is the id of the k-th stored edge. Boolean
tensors arrive as uint8 (DGL converts them before saving).
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gtscale.errors import UserError

FILE_MAGIC = 0xDD2E4FF046B4A13F
FILE_VERSION = 2
HEADER_BYTES = 4096
HETEROGRAPH_MAGIC = 0xDD589FBE35224ABF
IMMUTABLE_GRAPH_MAGIC = 0xDD3C5FFE20046ABF
UNIT_GRAPH_MAGIC = 0xDD2E60F0F6B4A127
COO_MAGIC = 0xDD61FFD305DFF127
CSR_MAGIC = 0xDD6CD31205DFF127
NDARRAY_MAGIC = 0xDD5E40F096B4A13F
COO_CODE, CSR_CODE, CSC_CODE = 1, 2, 4
#: DGL's (type code, bits) → numpy dtype (codes: 0 int, 1 uint, 2 float)
_DTYPES = {(c, b): np.dtype(f"<{k}{b // 8}") for c, k in ((0, "i"), (1, "u"), (2, "f")) for b in (8, 16, 32, 64) if not (k == "f" and b == 8)}


@dataclass
class SparseAdjacency:
    """One stored format of a relation graph: COO (row=src, col=dst), CSR or CSC."""

    kind: str  # "coo", "csr" or "csc"
    num_rows: int
    num_cols: int
    first: np.ndarray  # COO row / CSR, CSC indptr
    second: np.ndarray  # COO col / CSR, CSC indices
    data: np.ndarray  # edge ids of the stored entries; empty: 0..E−1

    @property
    def num_edges(self) -> int:
        return len(self.second)


@dataclass
class DGLGraphFile:
    """The first graph of a DGL file: its one relation graph and its node and edge tensors."""

    path: Path
    num_nodes: int
    adjacency: SparseAdjacency
    ndata: dict[str, np.ndarray] = field(default_factory=dict)
    edata: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return self.adjacency.num_edges

    def edge_chunks(self, chunk: int = 1 << 22):
        """(start, src, dst) blocks in stored order: what the store build needs (order-free)."""
        adj = self.adjacency
        for start in range(0, adj.num_edges, chunk):
            stop = min(start + chunk, adj.num_edges)
            if adj.kind == "coo":
                yield start, np.asarray(adj.first[start:stop]), np.asarray(adj.second[start:stop])
                continue
            rows = _rows_of_entries(np.asarray(adj.first), start, stop)
            cols = np.asarray(adj.second[start:stop])
            yield (start, rows, cols) if adj.kind == "csr" else (start, cols, rows)

    def edges_by_id(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) ordered by edge id, as DGL's `g.edges(order="eid")` returns them."""
        adj = self.adjacency
        src = np.empty(adj.num_edges, np.int64)
        dst = np.empty(adj.num_edges, np.int64)
        for start, s, d in self.edge_chunks():
            ids = np.arange(start, start + len(s)) if len(adj.data) == 0 else np.asarray(adj.data[start : start + len(s)])
            src[ids], dst[ids] = s, d
        return src, dst


def _rows_of_entries(indptr: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Row index of CSR entries start..stop−1."""
    return (np.searchsorted(indptr, np.arange(start, stop), side="right") - 1).astype(np.int64)


class _Cursor:
    """Reads DGL's serialized values from a memory-mapped file; every overrun is a one-line error."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.size = size
        self.pos = 0

    def fail(self, what: str, at: int | None = None) -> UserError:
        return UserError(f"{self.path}: byte {self.pos if at is None else at}: {what}")

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"truncated file: {what} needs {n} bytes, the file ends at byte {self.size}")
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, dtype: str, what: str) -> int:
        start = self.take(np.dtype(dtype).itemsize, what)
        return int(np.frombuffer(self.buf, dtype, 1, start)[0])

    def u64(self, what: str) -> int:
        return self.scalar("<u8", what)

    def i64(self, what: str) -> int:
        return self.scalar("<i8", what)

    def magic(self, expected: int, what: str) -> None:
        at = self.pos
        if self.u64(what) != expected:
            raise self.fail(f"not a DGL {what} (wrong magic number); is the file corrupt?", at)

    def length(self, what: str) -> int:
        at, n = self.pos, self.u64(what)
        if n > self.size:  # a length larger than the file cannot be right
            raise self.fail(f"corrupt {what} length {n}", at)
        return n

    def string(self, what: str) -> str:
        n = self.length(what)
        start = self.take(n, what)
        return bytes(self.buf[start : start + n]).decode("utf-8", errors="replace")

    def ndarray(self, what: str) -> np.ndarray:
        self.magic(NDARRAY_MAGIC, f"tensor ({what})")
        self.take(8 + 8, what)  # reserved, device (type, id): saved arrays are CPU arrays
        at = self.pos
        ndim = self.scalar("<i4", what)
        code, bits, lanes = self.scalar("<u1", what), self.scalar("<u1", what), self.scalar("<u2", what)
        if not 0 <= ndim <= 8 or lanes != 1 or (code, bits) not in _DTYPES:
            raise self.fail(f"tensor {what!r} has an unsupported layout (ndim {ndim}, type {code}/{bits}/{lanes})", at)
        dtype = _DTYPES[(code, bits)]
        shape_at, shape = self.pos, tuple(self.i64(what) for _ in range(ndim))
        if any(d < 0 for d in shape):
            raise self.fail(f"tensor {what!r} has a negative dimension in its shape {shape}", shape_at)
        at, nbytes = self.pos, self.i64(what)
        count = math.prod(shape)  # Python integers: a shape whose product overflows int64 cannot wrap into a match
        if nbytes != count * dtype.itemsize:
            raise self.fail(f"tensor {what!r}: {nbytes} data bytes for shape {shape} of {dtype}", at)
        start = self.take(nbytes, f"tensor {what!r}")
        return np.frombuffer(self.buf, dtype, count, start).reshape(shape)  # zero-copy view of the map

    def named_tensors(self, what: str) -> dict[str, np.ndarray]:
        out = {}
        for _ in range(self.length(what)):
            name = self.string(what)
            out[name] = self.ndarray(name)
        return out

    def flag(self, what: str) -> bool:
        return bool(self.scalar("<u1", what))


def _csr_matrix(cur: _Cursor, kind: str, what: str) -> SparseAdjacency:
    cur.magic(CSR_MAGIC, f"CSR matrix ({what})")
    num_cols, num_rows = cur.i64(what), cur.i64(what)
    indptr, indices, data = cur.ndarray(f"{what} indptr"), cur.ndarray(f"{what} indices"), cur.ndarray(f"{what} data")
    cur.flag(what)  # sorted
    return SparseAdjacency(kind, num_rows, num_cols, indptr, indices, data)


def _coo_matrix(cur: _Cursor, what: str) -> SparseAdjacency:
    cur.magic(COO_MAGIC, f"COO matrix ({what})")
    num_cols, num_rows = cur.i64(what), cur.i64(what)
    row, col, data = cur.ndarray(f"{what} row"), cur.ndarray(f"{what} col"), cur.ndarray(f"{what} data")
    cur.flag(what), cur.flag(what)  # row_sorted, col_sorted
    return SparseAdjacency("coo", num_rows, num_cols, row, col, data)


def _immutable_graph(cur: _Cursor) -> None:
    """A metagraph: only its structure is read (to move past it)."""
    cur.magic(IMMUTABLE_GRAPH_MAGIC, "metagraph")
    _csr_matrix(cur, "csr", "metagraph")


def _unit_graph(cur: _Cursor) -> list[SparseAdjacency]:
    cur.magic(UNIT_GRAPH_MAGIC, "relation graph")
    at, saved = cur.pos, cur.i64("saved formats")
    cur.i64("allowed formats")
    codes = saved & 0xFFFFFFFF if saved >> 32 else {1: COO_CODE, 2: CSR_CODE, 3: CSC_CODE}.get(saved, 0)
    if not codes & (COO_CODE | CSR_CODE | CSC_CODE):
        raise cur.fail(f"relation graph saved in unknown format code {saved:#x}", at)
    stored = []
    for code, kind in ((COO_CODE, "coo"), (CSR_CODE, "csr"), (CSC_CODE, "csc")):
        if codes & code:
            _immutable_graph(cur)
            stored.append(_coo_matrix(cur, kind) if kind == "coo" else _csr_matrix(cur, kind, kind))
    return stored


def read_dgl_graph(path: str | Path) -> DGLGraphFile:
    """The first graph of a `dgl.save_graphs` file, its arrays memory-mapped (read-only views)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such DGL graph file")
    cur = _Cursor(path)
    cur.magic(FILE_MAGIC, "graph file")
    at, version = cur.pos, cur.u64("version")
    if version != FILE_VERSION:
        raise cur.fail(f"DGL graph file format version {version}; only version {FILE_VERSION} (dgl.save_graphs of DGL ≥ 0.5) is read", at)
    cur.u64("graph type")
    at, num_graphs = cur.pos, cur.u64("number of graphs")
    if num_graphs < 1:
        raise cur.fail("the file holds no graph", at)
    cur.take(HEADER_BYTES - cur.pos, "header")
    at, gdata_start = cur.pos, cur.u64("graph data offset")
    if not cur.pos <= gdata_start <= cur.size:
        raise cur.fail(f"graph data offset {gdata_start} lies outside the file", at)
    cur.pos = gdata_start  # skip the labels dictionary
    cur.magic(HETEROGRAPH_MAGIC, "heterograph")
    _immutable_graph(cur)
    at, num_relations = cur.pos, cur.length("relation graphs")
    if num_relations != 1:
        raise cur.fail(f"{num_relations} relation graphs (edge types); only homogeneous graphs are read", at)
    stored = _unit_graph(cur)
    nodes_per_type = [cur.i64("nodes per type") for _ in range(cur.length("node types"))]
    ndata = [cur.named_tensors("node tensors") for _ in range(cur.length("node tensor groups"))]
    edata = [cur.named_tensors("edge tensors") for _ in range(cur.length("edge tensor groups"))]
    if len(nodes_per_type) != 1:
        raise cur.fail(f"{len(nodes_per_type)} node types; only homogeneous graphs are read")
    return DGLGraphFile(path, nodes_per_type[0], stored[0], ndata[0] if ndata else {}, edata[0] if edata else {})
