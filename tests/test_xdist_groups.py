"""The suite's scheduling under `./launch/test` (pytest-xdist, --dist loadgroup): a named
xdist_group and the tests sharing a module-scoped fixture (xdist_groups.py) each run on one worker."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

MODULE = '''
import os
import pytest

def record(kind):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(f"{kind} {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.fixture(scope="module")
def shared():
    return "built"

@pytest.mark.parametrize("i", range(6))
def test_sharing_a_module_fixture(shared, i):
    record("shared")

@pytest.mark.xdist_group("named")
@pytest.mark.parametrize("i", range(6))
def test_in_a_named_group(i):
    record("named")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    record("free")
'''


def test_a_named_group_and_a_modules_fixture_sharers_each_run_on_one_worker(tmp_path):
    (tmp_path / "test_generated.py").write_text(MODULE)
    (tmp_path / "conftest.py").write_text("from xdist_groups import pytest_itemcollected  # noqa: F401\n")
    log = tmp_path / "workers.log"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), "WORKERS_LOG": str(log)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        kind, worker = line.split()
        workers.setdefault(kind, set()).add(worker)
    assert len(workers["named"]) == 1 and len(workers["shared"]) == 1, workers
