"""The package's imports point one way along the data path (docs/internals/architecture.md).

Every package and every top-level module of gtscale has a row below: the parts of gtscale it may
import. format ← prep, format ← loader ← models ← train, graphs beside prep (on format, prep and
loader; train samples node tasks from it); interop on models and format; inference on the data
path; members (an ensemble's members, fitted, exported and read back, and the ensemble) on
inference; sweep (seed runs and their tables) on train and members; predict on members; fit on
predict and sweep; fingerprint (and fingerprint_export, which export's representation it writes)
on predict; offline (ogb imported without its version check) under the package itself; experiments (the baselines and the MoleculeACE table)
on members and sweep, and nothing below bench and cli on experiments; bench and cli on top of all
of them, cli above bench (it dispatches to the benchmarks). A module without a row, or an import
its row does not allow, fails the test, naming the file and the import.

Only the cli package reads a command line: it declares every command (one module per command,
parsing its options and calling a library function with them). No other module imports argparse
or gtscale.cli, or defines an `add_arguments`, so a library function is called with keyword
parameters, never with a parsed Namespace.

No module of the package imports another through a circle, inside a package or across packages.
An import inside a function counts too: moving an import into a function to dodge a circle hides
the circle from Python, not from this test (train/config.py did that with data_source, node_task
and task_model until the cross-checks moved to train/preflight.py). In a module that imports by
name (importlib.import_module: cli/__init__.py and its command table), each module its strings name counts
as imported; elsewhere such a string names what another process runs (`python -m gtscale.cli`, a
fork server's preload), which is no import."""

from __future__ import annotations

import ast
from pathlib import Path

import gtscale

ROOT = Path(gtscale.__file__).parent

#: The leaves every part may use: errors, atomic writes, YAML loading, and the package's own
#: __init__ (its version).
SHARED = {"errors", "io", "config", "__init__"}
#: part (package or top-level module) → the parts it may import besides itself
ALLOWED = {
    "__init__": {"offline"},
    "offline": set(),  # imports ogb without its version check, before anything else does
    "errors": set(),
    "io": {"errors"},
    "config": {"errors"},
    "allocator": set(),
    "format": SHARED,
    "prep": SHARED | {"format"},
    "loader": SHARED | {"format"},
    "graphs": SHARED | {"format", "prep", "loader"},
    "models": SHARED | {"format", "loader"},
    "train": SHARED | {"format", "loader", "models", "graphs"},  # graphs: node tasks sampled online from a graph store
    "interop": SHARED | {"format", "models"},
    "inference": SHARED | {"format", "prep", "loader", "models", "train"},
    "members": SHARED | {"format", "prep", "models", "train", "inference"},
    "sweep": SHARED | {"format", "prep", "train", "members"},
    "predict": SHARED | {"format", "prep", "loader", "models", "train", "inference", "members"},
    "fit": SHARED | {"format", "prep", "models", "train", "inference", "members", "predict", "sweep"},
    "fingerprint_export": SHARED | {"format", "prep", "loader", "models", "train", "inference", "members", "predict"},
    "fingerprint": SHARED | {"format", "prep", "loader", "models", "train", "inference", "members", "predict", "fingerprint_export"},
    "experiments": SHARED | {"format", "prep", "models", "train", "inference", "members", "sweep"},
    "bench": SHARED | {"allocator", "format", "prep", "loader", "graphs", "models", "train", "interop", "inference",
                       "members", "sweep", "predict", "fit", "fingerprint_export", "fingerprint", "experiments"},
    "cli": SHARED | {"allocator", "format", "prep", "loader", "graphs", "models", "train", "interop", "inference",
                     "members", "sweep", "predict", "fit", "fingerprint_export", "fingerprint", "experiments", "bench"},
}
#: The parts that may import experiments/ (tables and baselines above the core, which none of the core imports).
ABOVE_EXPERIMENTS = {"bench", "cli"}


def package_modules(root: Path) -> dict[str, Path]:
    """Dotted name → file of every module of the package in `root` (a folder named gtscale)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[: -1 if parts[-1] == "__init__" else None])] = path
    return modules


def part_of(module: str) -> str:
    """The row of `module`: its top-level package or module under gtscale ("__init__" for gtscale itself)."""
    return module.split(".")[1] if "." in module else "__init__"


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` (in `path`) imports anywhere, also inside
    functions: `import a.b` gives a.b; `from a import b` gives a.b when b is a module, else a;
    relative imports are resolved; in a file that calls importlib.import_module, every string
    constant that names a module of `known`."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    by_name = any(isinstance(node, ast.Attribute) and node.attr == "import_module" for node in ast.walk(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])]) if node.level \
                else node.module
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
        elif by_name and isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return (found & known) - {name}


def import_graph(root: Path) -> dict[str, list[str]]:
    """module → the modules of the package it imports, for the package in `root`."""
    modules = package_modules(root)
    return {name: sorted(imported_modules(name, path, set(modules))) for name, path in modules.items()}


def circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Circles of a directed graph, each as the nodes it passes through, back to the first."""
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in graph.get(node, ()):
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [node, target])
            elif target not in state:
                visit(target, path + [node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])
    return found


def test_every_part_of_the_package_has_a_row():
    parts = {part_of(name) for name in package_modules(ROOT)}
    assert parts - set(ALLOWED) == set(), "parts without a row in ALLOWED"
    assert set(ALLOWED) - parts == set(), "rows of parts the package no longer has"


def test_the_rows_point_one_way():
    assert not circles({part: sorted(allowed) for part, allowed in ALLOWED.items()})


def test_only_the_parts_above_experiments_may_import_it():
    assert {part for part, allowed in ALLOWED.items() if "experiments" in allowed} == ABOVE_EXPERIMENTS
    assert not ALLOWED["members"] & {"experiments", "sweep", "predict", "fit", "fingerprint_export", "fingerprint", "bench", "cli"}


def violations(root: Path) -> list[str]:
    """"file imports module" for each import of the package in `root` that its row does not allow."""
    files = package_modules(root)
    return [f"{files[name].relative_to(root.parent)} imports {target}" for name, targets in import_graph(root).items()
            for target in targets if part_of(target) not in ALLOWED[part_of(name)] | {part_of(name)}]


def test_imports_point_one_way():
    found = violations(ROOT)
    assert not found, "\n".join(found)


def test_no_import_circles():
    found = circles(import_graph(ROOT))
    assert not found, "\n".join(" → ".join(circle) for circle in found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "gtscale"
    for relative, text in {"__init__.py": "", **files}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def test_checker_sees_each_form_of_import(tmp_path):
    root = _package(tmp_path, {
        "cli/__init__.py": 'import importlib\nCOMMANDS = {"train": "gtscale.cli.train"}\nimportlib.import_module(COMMANDS["train"])\n',
        "cli/train.py": "from gtscale.train import trainer\n",
        "train/__init__.py": "",
        "train/trainer.py": "def f():\n    from gtscale.train import config\n    from . import preflight\n",
        "train/config.py": "from gtscale import __version__\nfrom ..format import schema\nimport gtscale.loader.stream\n",
        "train/preflight.py": "from .config import load\n",
        "format/__init__.py": "",
        "format/schema.py": "",
        "loader/__init__.py": "",
        "loader/stream.py": "",
        "loader/workers.py": 'PRELOAD = ["gtscale.loader.stream"]\n',
    })
    graph = import_graph(root)
    assert graph["gtscale.cli"] == ["gtscale.cli.train"]  # the command table, imported by name
    assert graph["gtscale.cli.train"] == ["gtscale.train.trainer"]
    assert graph["gtscale.loader.workers"] == []  # a name for another process (a fork server's preload)
    assert graph["gtscale.train.trainer"] == ["gtscale.train.config", "gtscale.train.preflight"]
    assert graph["gtscale.train.config"] == ["gtscale", "gtscale.format.schema", "gtscale.loader.stream"]
    assert graph["gtscale.train.preflight"] == ["gtscale.train.config"]
    assert [part_of(name) for name in graph["gtscale.train.config"]] == ["__init__", "format", "loader"]


def test_checker_sees_a_circle_dodged_inside_a_function(tmp_path):
    root = _package(tmp_path, {
        "train/__init__.py": "",
        "train/config.py": "def load():\n    from gtscale.train.data_source import manifest\n",
        "train/data_source.py": "from gtscale.train.config import DataConfig\n",
        "train/trainer.py": "from gtscale.train import config, data_source\n",
    })
    assert circles(import_graph(root)) == [["gtscale.train.config", "gtscale.train.data_source", "gtscale.train.config"]]


def test_checker_sees_a_circle_across_packages(tmp_path):
    root = _package(tmp_path, {
        "cli/__init__.py": 'import importlib\n\ndef main(name):\n    importlib.import_module({"model": "gtscale.bench.model"}[name])\n',
        "bench/__init__.py": "",
        "bench/model.py": "def run():\n    from gtscale.cli import main\n",
    })
    assert circles(import_graph(root)) == [["gtscale.bench.model", "gtscale.cli", "gtscale.bench.model"]]


def test_checker_sees_a_violation(tmp_path):
    root = _package(tmp_path, {
        "models/__init__.py": "",
        "models/egt.py": "def f():\n    from gtscale.train.trainer import Trainer\n",
        "train/__init__.py": "",
        "train/trainer.py": "from gtscale.models import egt\n",
    })
    assert violations(root) == ["gtscale/models/egt.py imports gtscale.train.trainer"]


def argument_parsing_outside_cli(root: Path) -> list[str]:
    """"file imports argparse" / "file defines add_arguments" / "file imports gtscale.cli" for each
    module of the package in `root` outside its cli package that reads a command line."""
    found = []
    for name, path in package_modules(root).items():
        if part_of(name) == "cli":
            continue
        where = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.FunctionDef) and node.name == "add_arguments":
                found.append(f"{where} defines add_arguments")
                continue
            else:
                continue
            found += [f"{where} imports {n}" for n in names if n == "argparse" or n == "gtscale.cli" or n.startswith("gtscale.cli.")]
    return found


def test_only_the_cli_parses_arguments():
    found = argument_parsing_outside_cli(ROOT)
    assert not found, "\n".join(found)


def test_checker_sees_argument_parsing_outside_cli(tmp_path):
    root = _package(tmp_path, {
        "cli/__init__.py": "import argparse\n",
        "cli/shard.py": "import argparse\n\ndef add_arguments(parser):\n    pass\n",
        "prep/__init__.py": "",
        "prep/shard.py": "def add_arguments(parser):\n    import argparse\n",
        "bench/__init__.py": "",
        "bench/model.py": "from gtscale.cli.bench import model\n",
        "predict.py": "from gtscale.cli import main\n",
    })
    assert sorted(argument_parsing_outside_cli(root)) == [
        "gtscale/bench/model.py imports gtscale.cli.bench", "gtscale/predict.py imports gtscale.cli",
        "gtscale/prep/shard.py defines add_arguments", "gtscale/prep/shard.py imports argparse"]
