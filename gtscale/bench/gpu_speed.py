"""launch/gpu-speed's last step: the scratch folder's figures → a few small files in --out.

launch/gpu-speed runs the benchmarks and gpu-check (each under `timeout`) and leaves in its scratch
folder `steps.tsv` (step, status, seconds), `bench-<model>-<batch>.json` (`gtscale bench model
--json`) and `profile-<model>.md` (`--profile`). This writes into --out:
- bench.json: the steps and every benchmark's JSON, as they were written;
- summary.md: the steps, one throughput table over all benchmarks (each row ÷ eager: compiled, cudagraph), and
  gpu-check's report lines from the log;
- gpu-profile.md: the profiles, one after the other;
and prints summary.md. Exit status 1 when a step did not pass.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from gtscale.bench.report import write_json, write_markdown

#: gtscale/bench/gpu_check.py's report lines (its stderr, warnings included, is in the log too).
_CHECK_LINE = re.compile(r"^(\[[1-3]/3\] |      |gpu-check: )")


def read_steps(work: Path) -> list[dict]:
    path = work / "steps.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines()] if path.is_file() else []
    return [{"step": name, "status": status, "seconds": int(seconds)} for name, status, seconds in rows]


def read_benches(work: Path, steps: list[dict]) -> list[dict]:
    """Every benchmark's JSON, in the order the steps ran (a step cut short wrote none)."""
    files = [work / f"bench-{s['step'].removeprefix('bench ')}.json" for s in steps if s["step"].startswith("bench ")]
    return [json.loads(path.read_text()) | {"file": path.name} for path in files if path.is_file()]


def check_lines(log: Path) -> list[str]:
    """gpu-check's report: its lines in the log's gpu-check section."""
    lines, inside = [], False
    for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
        if line.startswith("[gpu-speed] "):
            inside = line.startswith("[gpu-speed] gpu-check")
        elif inside and _CHECK_LINE.match(line):
            lines.append(line)
    return lines


def throughput_table(runs: list[dict]) -> list[str]:
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


def summary(steps: list[dict], runs: list[dict], check: list[str], seconds: int) -> str:
    device = runs[0]["setup"]["device"] if runs else "?"
    torch_version = runs[0]["setup"]["torch"] if runs else "?"
    lines = [f"# launch/gpu-speed on {device} (torch {torch_version}), {seconds} s in all", "",
             "| step | status | s |", "|---|---|---:|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']} |" for s in steps]
    lines += ["", "## Training steps, bf16 (`gtscale bench model --compile`)", "", *throughput_table(runs), "",
              "## `launch/gpu-check --compile`", "", "```", *(check or ["(no report: see gpu-speed.log)"]), "```", ""]
    return "\n".join(lines)


def profiles(work: Path) -> str:
    """The profile reports one after the other, their headings one level down."""
    parts = ["# One training step's costliest kernels (launch/gpu-speed)", ""]
    for path in sorted(work.glob("profile-*.md")):
        text = path.read_text().split("\n", 1)[1]  # without its "written by" line
        parts.append(re.sub(r"^#", "##", text, flags=re.MULTILINE))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gtscale.bench.gpu_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="launch/gpu-speed's scratch folder")
    parser.add_argument("--out", type=Path, required=True, help="where the few result files go")
    parser.add_argument("--log", type=Path, required=True, help="launch/gpu-speed's log (gpu-check's report is read from it)")
    parser.add_argument("--seconds", type=int, default=0, help="the whole run's wall time")
    args = parser.parse_args(argv)
    steps = read_steps(args.work)
    runs = read_benches(args.work, steps)
    write_json(args.out / "bench.json", {"seconds": args.seconds, "steps": steps, "runs": runs}, "gpu-speed", indent=1)
    text = summary(steps, runs, check_lines(args.log), args.seconds)
    write_markdown(args.out / "summary.md", text, "gpu-speed", "--out")
    write_markdown(args.out / "gpu-profile.md", profiles(args.work), "gpu-speed", "--out")
    print(text)
    print(f"gpu-speed: {args.out}: summary.md, bench.json, gpu-profile.md, gpu-speed.log; scratch {args.work}")
    return 0 if steps and all(s["status"] == "ok" for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
