"""What a sharding run loads before its first molecule: the compiled kernels it needs, once, and no
more (each check runs `gtscale shard` in a fresh interpreter, whose imports and numba dispatchers
are the run's own)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from gtscale.prep.featurize import featurize_smiles
from gtscale.prep.sources.bundled import NCI_SMILES
from gtscale.prep.structure import twins_halve

REPORT = """
import json, sys
from gtscale.cli import main
from gtscale.prep import structure
assert main(sys.argv[1:]) == 0
print(json.dumps({"bfs": len(structure._bfs_stacked.signatures), "twins": len(structure._twin_reduced_svd_encodings.signatures),
                  "torch": "torch" in sys.modules}))
"""


def shard_report(tmp_path: Path, *options: str) -> dict:
    """Shard 40 NCI molecules with `options`; what the run's own process compiled and imported."""
    source = tmp_path / "mols.csv"
    smiles = [line.split()[0] for line in NCI_SMILES.read_text().splitlines()[:40]]
    source.write_text("smiles\n" + "\n".join(smiles) + "\n")
    for smi in smiles:  # the premise: no molecule whose twins halve its SVD problem
        graph = featurize_smiles(smi)
        adj = np.zeros((1, len(graph["node_feat"]), len(graph["node_feat"])), bool)
        adj[0, graph["edge_index"][0], graph["edge_index"][1]] = True
        assert not twins_halve(adj)[0], smi
    argv = ["shard", "smiles-csv", "--input", str(source), "--out", str(tmp_path / "out"), "--no-progress", *options]
    done = subprocess.run([sys.executable, "-c", REPORT, *argv], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_molecules_leave_the_twin_kernels_alone(tmp_path):
    """On a cold numba cache the twin kernels cost ~4 s of CPU to compile, for no molecule here."""
    assert shard_report(tmp_path)["twins"] == 0


def test_workers_inherit_the_kernels_compiled_once_in_the_parent(tmp_path):
    assert shard_report(tmp_path, "--workers", "2", "--shard-size", "10")["bfs"] == 1


def test_a_run_without_encodings_does_not_import_torch(tmp_path):
    report = shard_report(tmp_path, "--svd-rank", "0", "--lap-k", "0")
    assert report == {"bfs": 1, "twins": 0, "torch": False}
