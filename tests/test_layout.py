"""The package's imports point one way along the data path (README, "Architecture").

format ← prep, format ← loader ← models ← train, format/prep/loader ← graphs ← train; bench and cli sit on top. A module may import
only the packages its row allows; a violation names the file and the import.

Inside a package, modules import each other without a circle. An import inside a function counts
too: moving an import into a function to dodge a circle hides the circle from Python, not from
this test (train/config.py did that with data_source, node_task and task_model until the
cross-checks moved to train/preflight.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gtscale

ROOT = Path(gtscale.__file__).parent
#: package → gtscale packages it may import (besides itself and the shared leaf modules)
ALLOWED = {
    "format": set(),
    "prep": {"format"},
    "loader": {"format"},
    "models": {"format", "loader"},
    "train": {"format", "loader", "models", "graphs"},  # graphs: node tasks sampled online from a graph store
    "graphs": {"format", "prep", "loader"},
    "interop": {"format", "loader", "models"},
}
#: Leaf modules of the package root that every package may use.
SHARED = {"errors", "io", "config"}


def gtscale_imports(path: Path) -> list[str]:
    """Top-level gtscale subpackages or modules imported anywhere in the file (also inside functions)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [name.split(".")[1] for name in names if name.startswith("gtscale.")]
    return found


def test_imports_point_one_way():
    violations = []
    for package, allowed in ALLOWED.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for target in gtscale_imports(path):
                if target != package and target not in allowed | SHARED:
                    violations.append(f"{path.relative_to(ROOT.parent)} imports gtscale.{target}")
    assert not violations, "\n".join(violations)


def test_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from gtscale.train.trainer import Trainer\n")
    assert gtscale_imports(bad) == ["train"]


def module_imports(path: Path) -> set[str]:
    """Dotted gtscale names a file imports anywhere (also inside functions); `from a import b` gives
    both a and a.b, since b may be a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("gtscale.")}


def import_circles(root: Path, package: str) -> list[list[str]]:
    """Circles among the modules of `root`/`package` (root: the gtscale folder), each as the list
    of modules it passes through, back to the first."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(("gtscale", *parts[: -1 if parts[-1] == "__init__" else None]))] = path
    graph = {name: sorted(module_imports(path) & set(modules) - {name}) for name, path in modules.items()}
    circles, state = [], {}  # state: 1 on the current path, 2 done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in graph[name]:
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [name, target])
            elif target not in state:
                visit(target, path + [name])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [])
    return circles


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_circles(package):
    circles = import_circles(ROOT, package)
    assert not circles, "\n".join(" → ".join(circle) for circle in circles)


def test_checker_sees_a_circle_dodged_inside_a_function(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    (train / "config.py").write_text("def load():\n    from gtscale.train.data_source import manifest\n")
    (train / "data_source.py").write_text("from gtscale.train.config import DataConfig\n")
    (train / "trainer.py").write_text("from gtscale.train import config, data_source\n")
    assert import_circles(tmp_path, "train") == [["gtscale.train.config", "gtscale.train.data_source", "gtscale.train.config"]]
