"""docs/tutorial-csv.md does what it says: its first commands, run as written on its bundled CSVs,
exit 0, print the test table it shows (to rounding), and predict a row for every new molecule; the
later examples' commands are ones fit takes."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gtscale.cli import COMMANDS, _build_parser, main, parse

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial-csv.md"


def commands() -> list[list[str]]:
    """The gtscale commands of the page's bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", TUTORIAL.read_text(), flags=re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("gtscale ")]


def table_rows(text: str) -> dict[str, list[float]]:
    """model → its numbers, of the markdown test table in `text`."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[0-9.]+", cells[1]):
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


@pytest.mark.slow
def test_the_tutorials_commands_do_what_it_shows(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "docs" / "tutorial", tmp_path / "docs" / "tutorial")
    monkeypatch.chdir(tmp_path)
    steps = commands()
    assert [step[0] for step in steps] == ["fit", "predict", "fit", "fit", "fit", "fit", "fit"]
    for later in steps[2:]:  # the classification, several-columns and large-set examples, minutes each: their options at least are fit's
        assert parse(_build_parser(COMMANDS["fit"][0], "gtscale fit", "")[0], later[1:]).out.startswith("runs/")
    assert main(steps[0]) == 0
    printed = table_rows(capsys.readouterr().out)
    shown = table_rows(TUTORIAL.read_text().split("## 2. Read the report")[0])
    assert printed.keys() == shown.keys() and len(shown) == 3
    for model, numbers in shown.items():
        assert printed[model] == pytest.approx(numbers, abs=2e-3), model
    assert main(steps[1]) == 0
    new = pd.read_csv(tmp_path / "docs" / "tutorial" / "new-molecules.csv")
    predicted = pd.read_csv(tmp_path / "predictions.csv")
    assert list(predicted.columns) == [*new.columns, "activity_mean", "activity_std", "reason"]
    assert len(predicted) == len(new) and predicted["activity_mean"].notna().all()
