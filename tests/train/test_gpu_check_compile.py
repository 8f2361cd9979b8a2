"""launch/gpu-check --compile: what its training launches and benchmarks are given (the whole flow
compiled on the CPU takes minutes; tests/train/test_gpu_check.py runs the eager flow end to end);
and a launch past its time limit ends with all its processes."""

import os
import sys
import time
from pathlib import Path

from gtscale.bench.gpu_check import compile_note, plan, run_logged, train_command
from gtscale.config import CONFIG_ROOT
from gtscale.train.config import read_train_config

TPSA = str(CONFIG_ROOT / "tasks" / "nci-tpsa.yaml")


def overrides(command: list[str]) -> list[str]:
    """The dotted overrides of a `torchrun … gtscale.cli train CONFIG key=value …` command."""
    return [arg for arg in command[command.index(TPSA) + 1:] if "=" in arg]


def test_compile_reaches_the_training_config_and_the_benchmarks(tmp_path):
    p = plan(cpu=True, compile=True, out=tmp_path)
    assert "--compile" in p.bench_args
    for resume in (False, True):
        cfg = read_train_config(TPSA, overrides(train_command(p, TPSA, Path("shards"), tmp_path / "run", resume)))
        assert cfg.compile.enabled and cfg.data.loader.pad_to_bucket and cfg.data.loader.bucket_boundaries == [16, 32, 128]
        assert Path(cfg.compile.cache_dir) == tmp_path / "inductor"  # shared by the run and its resumption
        assert cfg.deepspeed.zero_stage == 2

    eager = plan(cpu=True, out=tmp_path)
    cfg = read_train_config(TPSA, overrides(train_command(eager, TPSA, Path("shards"), tmp_path / "run", False)))
    assert not cfg.compile.enabled and "--compile" not in eager.bench_args


def test_compile_note_reads_the_last_training_row(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "split": "train", "loss": 1.0, "compiled_graphs": 2, "batch_shapes": 2, "compile_cache_hits": 0}\n'
        '{"step": 2, "split": "train", "loss": 0.5, "compiled_graphs": 3.0, "batch_shapes": 3.0, "compile_cache_hits": 4.0}\n'
        '{"step": 2, "split": "valid", "mae": 0.7}\n')
    assert compile_note(tmp_path) == "; 3 compiled graphs for 3 batch shapes, 4 inductor cache hits"
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 1.0}\n')
    assert compile_note(tmp_path) == ""


def running(stat: Path) -> bool:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_launch_past_its_timeout_ends_with_every_process_under_it(tmp_path):
    # torchrun's way: the launcher starts its workers with setsid, out of reach of a kill of its
    # process group; such a worker must not outlive the check (it would hold a GPU).
    pid_file = tmp_path / "worker.pid"
    launcher = ("import subprocess, sys, time; "
                "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
                f"open({str(pid_file)!r}, 'w').write(str(w.pid)); time.sleep(120)")
    assert run_logged([sys.executable, "-c", launcher], tmp_path / "log", dict(os.environ), timeout=5) == 124
    stat = Path(f"/proc/{pid_file.read_text()}/stat")
    for _ in range(50):  # SIGKILL is delivered at once; gone, or a zombie until init reaps it
        if not running(stat):
            break
        time.sleep(0.1)
    assert not running(stat)
    assert run_logged([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "log", dict(os.environ), timeout=30) == 3
