"""Writes the DGL fixtures of tests/graphs/test_dgl_reader.py with REAL DGL (not a gtscale dependency).

Run once in a throwaway environment, outside the repository:
    python3 -m venv /tmp/dglenv
    /tmp/dglenv/bin/pip install dgl==1.1.3 torch==2.13.0 "setuptools<70" packaging pydantic pyyaml requests
    /tmp/dglenv/bin/python tests/graphs/make_dgl_fixtures.py tests/graphs/fixtures

Each fixture is a small graph saved by dgl.save_graphs in one stored format (COO, CSR or CSC) with
node data as GADBench stores it; beside it, <name>.expected.npz holds what DGL itself loads back
(dgl.load_graphs): num_nodes, src/dst in edge-id order, and every node-data array.
"""

import sys
from pathlib import Path

import dgl
import numpy as np
import torch


def graph(seed: int, num_nodes: int, num_edges: int, one_hot: bool, masks: bool, shuffled_ids: bool):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    if shuffled_ids:  # edge ids that are not CSR order: the stored `data` array is non-empty
        g = dgl.graph((src.flip(0), dst.flip(0)), num_nodes=num_nodes)
    g.ndata["feature"] = torch.randn(num_nodes, 5, generator=gen)
    label = (torch.rand(num_nodes, generator=gen) < 0.2).long()
    g.ndata["label"] = torch.nn.functional.one_hot(label, 2).float() if one_hot else label
    if masks:
        for name in ("train_masks", "val_masks", "test_masks"):
            g.ndata[name] = torch.rand(num_nodes, 20, generator=gen) < 0.4  # bool: DGL stores uint8
    return g


FIXTURES = {
    # name: (seed, nodes, edges, one-hot labels, masks, stored format)
    "coo_tsocial_like": (0, 40, 120, False, True, "coo"),
    "csr_tfinance_like": (1, 33, 90, True, True, "csr"),
    "csc_bwgnn_like": (2, 25, 70, False, False, "csc"),
    "csr_float_label": (3, 20, 50, False, False, "csr"),
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (seed, n, e, one_hot, masks, fmt) in FIXTURES.items():
        g = graph(seed, n, e, one_hot, masks, shuffled_ids=fmt != "coo")
        if name == "csr_float_label":
            g.ndata["label"] = g.ndata["label"].float()
        path = out / f"{name}.bin"
        dgl.save_graphs(str(path), [g], formats=[fmt])
        (loaded,), _ = dgl.load_graphs(str(path))
        src, dst = loaded.edges(order="eid")
        arrays = {"num_nodes": np.array(loaded.num_nodes()), "src": src.numpy(), "dst": dst.numpy()}
        arrays |= {f"ndata_{k}": v.numpy() for k, v in loaded.ndata.items()}
        np.savez(out / f"{name}.expected.npz", **arrays)
        print(name, fmt, path.stat().st_size, "bytes", loaded)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
