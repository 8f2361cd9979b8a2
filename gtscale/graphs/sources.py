"""Graph sources: DGL binary files, YelpChi/Amazon .mat files, a plain .npy folder.

Each reader returns a `GraphSource`: node arrays (memory-mapped where the file allows) and a
callable that yields the edges in blocks, so that the store build never holds the edge list as
Python objects and can pass over it twice. The synthetic generator lives in synthetic.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gtscale.errors import UserError
from gtscale.graphs import validate
from gtscale.graphs.dgl_file import read_dgl_graph

#: (first edge row, src, dst, relation bit mask per edge or None)
EdgeBlock = tuple[int, np.ndarray, np.ndarray, "np.ndarray | None"]
SPLITS = ("train", "val", "test")


@dataclass
class GraphSource:
    name: str
    num_nodes: int
    edge_blocks: Callable[[], Iterator[EdgeBlock]]  # a fresh pass over all edges per call
    feature_blocks: Callable[[], Iterator[tuple[int, np.ndarray]]]  # (first row, [rows, F])
    num_features: int
    labels: np.ndarray | None  # int8 [N] in {0, 1, −1}; None: graph_labels makes them
    masks: dict[str, np.ndarray] = field(default_factory=dict)  # split → bool [N, K]
    relations: list[str] = field(default_factory=list)  # bit r of a relation mask = relations[r]
    files: dict[str, str] = field(default_factory=dict)  # role (edges, features, labels) → file named in errors
    params: dict = field(default_factory=dict)  # recorded in the store's manifest
    #: labels that depend on the built graph (the synthetic neighbour signal): called with the
    #: store's indptr, indices and features once they are written; set exactly when labels is None
    graph_labels: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None


def _row_blocks(array: np.ndarray, rows: int) -> Callable[[], Iterator[tuple[int, np.ndarray]]]:
    def blocks():
        for start in range(0, len(array), rows):
            yield start, np.asarray(array[start : start + rows])

    return blocks


def _load_npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise UserError(f"{path}: missing")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as err:
        raise UserError(f"{path}: not a plain numpy array ({err})") from err


def _masks_from_splits(values: dict[str, np.ndarray], num_nodes: int, file) -> dict[str, np.ndarray]:
    """Split masks as bool [N, K]. A bool or uint8 array, or any 2-D one, is a mask ([N] or [N, K],
    values 0/1: GADBench's K = 20 columns); a 1-D array of other integers lists node ids."""
    masks = {}
    for split in SPLITS:
        if split not in values:
            continue
        v = np.asarray(values[split])
        if v.dtype in (np.bool_, np.uint8) or v.ndim == 2:
            if len(v) != num_nodes or v.ndim > 2 or not np.isin(v, (0, 1)).all():
                raise UserError(f"{file}: split {split!r} (shape {v.shape}) is not a 0/1 mask of {num_nodes} rows")
            masks[split] = np.asarray(v != 0).reshape(num_nodes, -1)
            continue
        if v.ndim != 1 or not np.issubdtype(v.dtype, np.integer) or (len(v) and (v.min() < 0 or v.max() >= num_nodes)):
            raise UserError(f"{file}: split {split!r} is neither a mask nor node ids in 0..{num_nodes - 1}")
        mask = np.zeros((num_nodes, 1), bool)
        mask[v, 0] = True
        masks[split] = mask
    return masks


def dgl_source(path: str | Path, edge_block: int = 1 << 22) -> GraphSource:
    """A GADBench / BWGNN DGL file: ndata `feature` [N, F], `label` [N] or one-hot [N, 2],
    optional `train_masks` / `val_masks` / `test_masks` [N, K]."""
    graph = read_dgl_graph(path)
    n, file = graph.num_nodes, str(graph.path)
    for key in ("feature", "label"):
        if key not in graph.ndata:
            raise UserError(f"{file}: node data lacks {key!r} (has {sorted(graph.ndata)})")
    features, raw = graph.ndata["feature"], graph.ndata["label"]
    if features.ndim != 2:
        raise UserError(f"{file}: feature has shape {features.shape}; expected [N, F]")
    labels = validate.one_hot_labels(raw, file) if raw.ndim == 2 else validate.labels_int8(raw, file)
    validate.check_lengths(n, features, labels, file)
    masks = _masks_from_splits({s: graph.ndata[f"{s}_masks"] for s in SPLITS if f"{s}_masks" in graph.ndata}, n, file)

    def edges():
        for start, src, dst in graph.edge_chunks(edge_block):
            yield start, src, dst, None

    return GraphSource(Path(path).stem, n, edges, _row_blocks(features, 1 << 20), features.shape[1], labels, masks,
                       files={"edges": file, "features": file, "labels": file}, params={"source": "dgl", "input": str(path)})


def plain_source(folder: str | Path, edge_block: int = 1 << 22) -> GraphSource:
    """A folder with edges.npy (E×2 integers), features.npy (N×F floats), labels.npy (N, −1 unknown)
    and optionally splits.npz (train / val / test: masks or node ids)."""
    folder = Path(folder)
    edges, features, labels_raw = (_load_npy(folder / f"{name}.npy") for name in ("edges", "features", "labels"))
    if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise UserError(f"{folder / 'edges.npy'}: shape {edges.shape} of {edges.dtype}; expected [E, 2] integers")
    if features.ndim != 2 or not (np.issubdtype(features.dtype, np.floating) or np.issubdtype(features.dtype, np.integer)):
        raise UserError(f"{folder / 'features.npy'}: shape {features.shape} of {features.dtype}; expected [N, F] numbers")
    labels = validate.labels_int8(labels_raw, folder / "labels.npy")
    n = len(features)
    if len(labels) != n:
        raise UserError(f"{folder / 'labels.npy'}: {len(labels)} labels for {n} feature rows in features.npy")
    masks = {}
    if (folder / "splits.npz").is_file():
        try:
            with np.load(folder / "splits.npz", allow_pickle=False) as z:
                masks = _masks_from_splits({k: z[k] for k in z.files}, n, folder / "splits.npz")
        except ValueError as err:
            raise UserError(f"{folder / 'splits.npz'}: not plain numpy arrays ({err})") from err

    def blocks():
        for start in range(0, len(edges), edge_block):
            block = np.asarray(edges[start : start + edge_block])  # uint64 too: checked as it is, then cast
            yield start, block[:, 0], block[:, 1], None

    files = {"edges": str(folder / "edges.npy"), "features": str(folder / "features.npy"), "labels": str(folder / "labels.npy")}
    return GraphSource(folder.name, n, blocks, _row_blocks(features, 1 << 20), features.shape[1], labels, masks, files=files,
                       params={"source": "plain", "input": str(folder)})


def mat_source(path: str | Path, relations: str = "union") -> GraphSource:
    """YelpChi / Amazon fraud graphs (.mat): `net_*` sparse relations, sparse `features`, `label`.

    relations="union" homogenises them into one relation; "typed" keeps, per edge, a bit mask of
    the relations it belongs to (bit r = the r-th `net_*` key in sorted order)."""
    try:
        import scipy.io
        import scipy.sparse
    except ImportError as err:  # a runtime dependency, imported only for this source
        raise UserError("reading .mat graphs needs scipy (pip install scipy)") from err
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: missing")
    try:
        mat = scipy.io.loadmat(path)
    except Exception as err:  # scipy raises several types for a file that is not a .mat
        raise UserError(f"{path}: not a MATLAB .mat file ({err})") from err
    names = sorted(k for k in mat if k.startswith("net_"))
    for key in ("features", "label"):
        if key not in mat:
            raise UserError(f"{path}: lacks {key!r} (has {sorted(k for k in mat if not k.startswith('__'))})")
    if not names:
        raise UserError(f"{path}: no relation (net_*) matrices")
    if len(names) > 8:
        raise UserError(f"{path}: {len(names)} relations; at most 8 fit the relation bit mask")
    raw = mat["features"]
    features = (raw.toarray() if scipy.sparse.issparse(raw) else np.asarray(raw)).astype(np.float32)
    labels = validate.labels_int8(np.asarray(mat["label"]).reshape(-1), path)
    n = len(features)
    if len(labels) != n:
        raise UserError(f"{path}: {len(labels)} labels for {n} feature rows")
    coos = [scipy.sparse.coo_matrix(mat[name]) for name in names]
    for name, coo in zip(names, coos):
        if coo.shape != (n, n):
            raise UserError(f"{path}: relation {name} has shape {coo.shape}; expected ({n}, {n})")
    typed = relations == "typed"

    def blocks():
        start = 0
        for r, coo in enumerate(coos):
            bits = np.full(coo.nnz, 1 << r, np.uint8) if typed else None
            yield start, coo.row.astype(np.int64), coo.col.astype(np.int64), bits
            start += coo.nnz

    return GraphSource(path.stem, n, blocks, _row_blocks(features, 1 << 20), features.shape[1], labels,
                       relations=names if typed else [], files={"edges": str(path), "features": str(path), "labels": str(path)},
                       params={"source": "mat", "input": str(path), "relations": relations, "relation_keys": names})
