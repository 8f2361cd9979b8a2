"""The package's imports point one way along the data path (README, "Architecture").

format ← prep, format ← loader ← models ← train, format/prep/loader ← graphs ← train; bench and cli sit on top. A module may import
only the packages its row allows; a violation names the file and the import."""

from __future__ import annotations

import ast
from pathlib import Path

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
