"""launch/train: torchrun --standalone whose exit status is 75 when the ranks stopped for preemption
after checkpointing (torchrun alone reports 1), and a bad config is one line before any process."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gtscale.errors import UserError
from gtscale.train import run_lock
from launcher import NO_WORKERS, REPO, write_config

LAUNCH = REPO / "launch" / "train"


def launch_env() -> dict:
    """This interpreter's venv for launch/train, no launcher variables of an enclosing run."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return env | {"GTSCALE_VENV": str(Path(sys.executable).parents[1]), "OMP_NUM_THREADS": "1"}


def end_tree(proc: subprocess.Popen) -> None:
    """Kill the wrapper and the ranks it started (each in a session of its own) if still running."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)


@pytest.mark.parametrize(
    "codes,checkpointed,status",
    [
        ([], False, 0),
        ([75, 75], True, 75),
        ([75, -15], True, 75),  # the other rank ended by torchrun's SIGTERM after the checkpoint barrier
        ([75], False, 1),  # no checkpoint completed since the launch: not a resumable stop
        ([75, 1], True, 1),  # one rank crashed: a crash, whatever the other did
        ([1], True, 1),
        ([-9, -15], True, 1),  # killed, not stopped
        ([2, 2], False, 2),  # every rank refused its input
    ],
)
def test_exit_status_mapping(codes, checkpointed, status):
    from gtscale.train.local_launch import exit_status

    assert exit_status(codes, checkpointed) == status


def test_completed_since_reads_the_complete_markers(tmp_path):
    from gtscale.io import atomic_write_text
    from gtscale.train.local_launch import completed_since

    for step in (2, 4):
        (tmp_path / f"step-0000000{step}").mkdir()
    atomic_write_text(tmp_path / "step-00000002" / "COMPLETE", json.dumps({"step": 2}))
    start = time.time() + 1
    assert completed_since(tmp_path, start) is None  # written before the launch
    os.utime(tmp_path / "step-00000002" / "COMPLETE", (start + 1, start + 1))
    assert completed_since(tmp_path, start) == "step-00000002"  # step 4 never completed
    assert completed_since(tmp_path / "none", start) is None


def test_bad_config_is_one_line_before_torchrun(tpsa_shards, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run")
    result = subprocess.run([str(LAUNCH), "--nproc_per_node", "2", str(cfg), "checkpoint.every=0"], env=launch_env(),
                            capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines == ["launch/train: error: checkpoint.every: must be >= 1, got 0"], result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sigusr1_to_the_wrapper_checkpoints_and_exits_75(tpsa_shards, tmp_path):
    """Two real ranks under torchrun: SIGUSR1 to launch/train reaches both, they checkpoint at one
    step and exit 75, and the wrapper exits 75 where torchrun would exit 1."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, run, schedule={"total_steps": 2000, "warmup_steps": 5}, data=NO_WORKERS)
    log = open(tmp_path / "launch.log", "wb")
    proc = subprocess.Popen([str(LAUNCH), "--nproc_per_node", "2", str(cfg)], env=launch_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 400
        while not (run / "metrics.jsonl").is_file() or '"split": "train"' not in (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "launch.log").read_text()[-3000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=300) == 75, (tmp_path / "launch.log").read_text()[-3000:]
    finally:
        end_tree(proc)
    output = (tmp_path / "launch.log").read_text()
    tags = sorted(p.name for p in (run / "checkpoints").iterdir() if (p / "COMPLETE").is_file())
    assert len(tags) == 1 and f"ranks exited 75 after checkpoint {tags[0]}: exiting 75" in output
    assert "Traceback" not in output


def _signal_targets(proc: subprocess.Popen, target: str) -> None:
    """SIGTERM as each sender does it: `kill PID`, `kill -TERM -PGID`, and scancel (every process of
    the job, the ranks and their DataLoader workers included)."""
    import psutil

    if target == "wrapper":
        proc.send_signal(signal.SIGTERM)
    elif target == "group":
        os.killpg(proc.pid, signal.SIGTERM)  # the wrapper leads its own group; the ranks have sessions of their own
    else:
        for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass


@pytest.mark.slow
@pytest.mark.parametrize("target,nproc,workers", [("wrapper", 1, 0), ("group", 1, 0), ("every", 2, 1)])
def test_sigterm_checkpoints_exits_75_and_resumes_at_its_step(tpsa_shards, tmp_path, target, nproc, workers):
    """SIGTERM however sent: the ranks checkpoint, launch/train exits 75 (torchrun's own handler used
    to stop them and exit 143), and --resume auto continues at the next step."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, run, schedule={"total_steps": 2000, "warmup_steps": 5}, data={"loader": {"num_workers": workers}})
    argv = [str(LAUNCH), "--nproc_per_node", str(nproc), str(cfg)]
    log = open(tmp_path / "launch.log", "wb")
    proc = subprocess.Popen(argv, env=launch_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 400
        while not (run / "metrics.jsonl").is_file() or '"split": "train"' not in (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "launch.log").read_text()[-3000:]
            time.sleep(0.5)
        with pytest.raises(UserError, match="another run is using it"):  # the running rank 0 holds run_dir
            run_lock.check_free(run)
        _signal_targets(proc, target)
        assert proc.wait(timeout=300) == 75, (tmp_path / "launch.log").read_text()[-3000:]
    finally:
        end_tree(proc)
    output = (tmp_path / "launch.log").read_text()
    tags = sorted(p.name for p in (run / "checkpoints").iterdir() if (p / "COMPLETE").is_file())
    assert len(tags) == 1 and "without a checkpoint" not in output and "Traceback" not in output, output[-3000:]
    step = json.loads((run / "checkpoints" / tags[0] / "COMPLETE").read_text())["step"]
    trained = len((run / "metrics.jsonl").read_text().splitlines())
    resumed = subprocess.run([*argv, f"max_steps={step + 1}", "--resume", "auto"], env=launch_env(), capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    new_rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()[trained:]]
    assert [r["step"] for r in new_rows if r["split"] == "train"] == [step + 1]
