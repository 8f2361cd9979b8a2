"""Session fixtures shared by every test folder; helper modules (fixtures_ogb.py, shard_fixtures.py)
are imported by name from this folder."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Inductor compiles in a pool of one worker process per core, each starting by importing torch and
# inductor; the suite already runs one test process per core, so in every compiling process (the
# tests' own, the training runs they start) the pool only adds that start-up (about 12 CPU-s of
# test_compiled_training's 130). One thread compiles in the process itself.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

from built_once import built_once  # noqa: E402
from shard_fixtures import SHARD_SIZES, nci_records, write_dataset  # noqa: E402
from xdist_groups import pytest_itemcollected  # noqa: E402, F401  (a hook: pytest finds it here)

#: The modules with the longest tests or groups (see `./launch/test`'s slowest durations), run
#: first: xdist hands work out in collection order, and a long unit started last leaves the other
#: worker idle at the end.
LONGEST_FIRST = (
    "train/test_compiled_training.py", "models/test_cli.py", "train/test_trainer.py", "test_fit.py", "test_bad_inputs.py",
    "prep/test_sharding.py", "experiments/test_moleculeace_table.py", "train/test_fanout_node_task.py", "test_quickstart.py",
    "train/test_gpu_check.py", "prep/test_fast_descriptors.py", "graphs/test_graph_sampling_bench.py", "train/test_local_launch.py",
    "train/test_predict.py", "train/test_checkpoint_safety.py", "experiments/test_moleculeace_sweep.py", "train/test_resolve.py",
    "models/test_compiled.py", "slurm/test_train_multinode.py", "train/test_export_finetune.py", "experiments/test_kernel_svr.py",
    "test_fit_large.py", "test_landmark.py", "bench/test_fit_bench.py", "test_fit_folder.py",
)


# Units of `--dist loadgroup`, each run by one worker, one test after another:
# - `xdist_group("inductor")`: the tests whose cost is inductor's C++ builds, since two cold
#   compiles side by side on 2 cores took twice as long each (test_compiled_training 224 s beside
#   another, 116 s alone), while the other worker runs the tests that wait on child processes;
# - `xdist_group("slurm")`: the tests that start a local SLURM cluster;
# - the tests of a module that share a module-scoped fixture (xdist_groups.py).
# Session fixtures that several modules use are built once per run by whichever worker asks first
# (built_once.py).


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(tests).as_posix() if item.path.is_relative_to(tests) else "", len(rank)))


@pytest.fixture(scope="session")
def nci_by_idx() -> dict[int, dict]:
    """idx → record for every molecule in the shard fixtures."""
    return dict(nci_records(sum(sum(sizes) for sizes in SHARD_SIZES.values())))


@pytest.fixture(scope="session")
def nci_shards(tmp_path_factory, nci_by_idx) -> Path:
    """A read-only manifest folder with uneven train/valid/test splits (tests must not modify it)."""
    return built_once(tmp_path_factory, "nci_shards", lambda out: write_dataset(out, list(nci_by_idx.items()), SHARD_SIZES))


@pytest.fixture
def nci_shards_copy(tmp_path, nci_shards) -> Path:
    """A private copy of the shard folder, for tests that corrupt files."""
    target = tmp_path / "shards"
    for path in nci_shards.rglob("*"):
        if path.is_file():
            dest = target / path.relative_to(nci_shards)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
            os.chmod(dest, 0o644)
    return target


@pytest.fixture(scope="session")
def tpsa_shards(tmp_path_factory) -> Path:
    """The bundled TPSA molecules in 2 train shards (of ~2000), as a user would shard them
    (read-only for tests; the training, SLURM and bad-input tests all train on it: one sharding)."""
    from gtscale.cli import main

    def shard(out):
        assert main(["shard", "nci-tpsa", "--out", str(out), "--shard-size", "2000", "--no-progress", "--lap-k", "0"]) == 0

    return built_once(tmp_path_factory, "tpsa", shard)


@pytest.fixture(scope="session")
def ego_shards(tmp_path_factory) -> tuple[Path, Path]:
    """(graph store, ego-shard folder): a small synthetic anomaly graph (600 nodes, 10 continuous
    features) cut by `gtscale shard graph-ego` into shards of 40 targets (read-only for tests)."""
    from gtscale.cli import main
    from gtscale.graphs.store import build_store
    from gtscale.graphs.synthetic import synthetic_source

    def build(root):
        build_store(synthetic_source(600, 3600, seed=3, anomaly_ratio=0.1), root / "store", feature_dtype="float16", progress=False)
        code = main(["shard", "graph-ego", "--graph", str(root / "store"), "--out", str(root / "shards"), "--train-ratio", "0.4",
                     "--shard-size", "40", "--fanouts", "5,3", "--max-nodes", "16", "--svd-rank", "4", "--no-progress"])
        assert code == 0

    root = built_once(tmp_path_factory, "ego_shards", build)
    return root / "store", root / "shards"
