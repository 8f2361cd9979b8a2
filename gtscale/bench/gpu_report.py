"""launch/gpu-check's report: the steps it ran and the figures they wrote → a few files in its folder.

- summary.md: each step's status and seconds, the training and resume report, one throughput table
  over every benchmark row (graphs/s, step ms, peak memory, TFLOP/s, MFU, compile s, each row ÷ eager);
- bench.json: the steps and every `gtscale bench model --json` as written;
- profile.md: the `--profile` tables (one training step's costliest kernels per row), one after the other.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from gtscale.bench.report import write_json, write_markdown


@dataclass
class StepRecord:
    """One step of a gpu-check run: its name, how it ended ("ok", "failed (exit 1)", "timed out
    after 120 s", "skipped: 20 s of the budget left", …) and its wall seconds."""

    name: str
    status: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def throughput_table(runs: list[dict]) -> list[str]:
    """One row per benchmark row of every `bench model --json`; the last column divides each
    row's graphs/s by the eager row's of the same model and batch size."""
    lines = ["| model | batch | impl | graphs/s | step ms | peak MiB | TFLOP/s | MFU | compile s | ÷ eager |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        eager = next((r for r in run["results"] if r["implementation"] == "model"), None)
        for r in run["results"]:
            ratio = f"{r['graphs_per_s'] / eager['graphs_per_s']:.2f}×" if eager and r is not eager else ""
            mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "-"
            compile_s = "" if r["compile_s"] is None else f"{r['compile_s']:.0f}"
            lines.append(f"| {Path(run['setup']['model']).stem} | {run['setup']['batch_size']:,} | {r['implementation']} | "
                         f"{r['graphs_per_s']:,.0f} | {r['step_ms']:.1f} | {r['peak_mem_mb']:,.0f} | {r['achieved_tflops']:.2f} | "
                         f"{mfu} | {compile_s} | {ratio} |")
    return lines


def summary(device: str, budget: float, steps: list[StepRecord], lines: list[str], runs: list[dict]) -> str:
    torch_version = runs[0]["setup"]["torch"] if runs else "?"
    spent = sum(s.seconds for s in steps)
    text = [f"# launch/gpu-check on {device} (torch {torch_version}): {spent:.0f} s of a {budget:.0f} s budget", "",
            "| step | status | s |", "|---|---|---:|"]
    text += [f"| {s.name} | {s.status} | {s.seconds:.0f} |" for s in steps]
    text += ["", "## Training, kill and resume", "", "```", *(lines or ["(not run)"]), "```", "",
             "## Training steps, bf16 (`gtscale bench model`)", "", *(throughput_table(runs) if runs else ["(no benchmark wrote figures)"]), ""]
    return "\n".join(text)


def profiles(paths: list[Path]) -> str:
    """The profile reports one after the other, their headings one level down."""
    parts = ["# One training step's costliest kernels (launch/gpu-check)", ""]
    for path in paths:
        if path.is_file():
            text = path.read_text().split("\n", 1)[1]  # without its "written by" line
            parts.append(re.sub(r"^#", "##", text, flags=re.MULTILINE))
    return "\n".join(parts)


def write_report(out: Path, device: str, budget: float, steps: list[StepRecord], lines: list[str], bench_files: list[Path],
                 profile_files: list[Path]) -> str:
    """Write summary.md, bench.json and profile.md into `out`; returns summary.md's text."""
    runs = [json.loads(path.read_text()) | {"file": path.name} for path in bench_files if path.is_file()]
    write_json(out / "bench.json", {"device": device, "budget_s": budget, "steps": [asdict(s) for s in steps], "runs": runs}, "gpu-check")
    text = summary(device, budget, steps, lines, runs)
    write_markdown(out / "summary.md", text, "gpu-check", "--out")
    write_markdown(out / "profile.md", profiles(profile_files), "gpu-check", "--out")
    return text
