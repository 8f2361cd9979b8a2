"""`gtscale train` without a launcher trains as one process; under srun it maps SLURM's task
variables; a half-set launcher environment is one line, not DeepSpeed's MPI-discovery traceback."""

import os
import subprocess
import sys

import pytest

from launcher import NO_WORKERS, REPO, metrics, write_config

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def no_node(nodelist):
    raise AssertionError(f"scontrol asked for {nodelist}")


def test_a_launchers_environment_is_left_alone():
    from gtscale.train.launch_env import rendezvous_env

    assert rendezvous_env(TORCHRUN, no_node) == ({}, None)
    # slurm/train.sbatch sets all five itself: SLURM's variables beside them change nothing.
    assert rendezvous_env(TORCHRUN | {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, no_node) == ({}, None)


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE"])
def test_a_half_set_launcher_environment_names_what_is_missing(missing):
    from gtscale.errors import UserError
    from gtscale.train.launch_env import rendezvous_env

    env = {k: v for k, v in TORCHRUN.items() if k != missing}
    with pytest.raises(UserError, match=f"^{missing}: RANK/WORLD_SIZE are set but {missing} not; start with torchrun"):
        rendezvous_env(env, no_node)


def test_srun_task_variables_become_the_rendezvous():
    from gtscale.train.launch_env import rendezvous_env

    srun = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
            "SLURM_JOB_ID": "123456", "SLURM_STEP_NODELIST": "gpu[03-04]", "SLURM_JOB_NODELIST": "gpu[01-04]"}
    add, note = rendezvous_env(srun, lambda nodelist: {"gpu[03-04]": "10.1.0.3"}[nodelist])
    assert add == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.1.0.3", "MASTER_PORT": str(20000 + 123456 % 20000)}
    assert note.startswith("srun step 0: rank 5 of 8") and "10.1.0.3:23456" in note
    # A rendezvous already chosen (GTSCALE_MASTER_* style, or by hand) is kept; no scontrol needed.
    add, _ = rendezvous_env(srun | {"MASTER_ADDR": "head", "MASTER_PORT": "4000"}, no_node)
    assert add == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}


def test_without_scontrol_srun_asks_for_master_addr(monkeypatch):
    from gtscale.errors import UserError
    from gtscale.train.launch_env import rendezvous_env

    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol on the PATH
    with pytest.raises(UserError, match="^MASTER_ADDR: not set, and scontrol could not name the first node of 'n1'"):
        rendezvous_env({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "n1"})


@pytest.mark.parametrize("env", [{}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "7"}], ids=["bare", "sbatch-shell"])
def test_no_launcher_is_a_single_process(env):
    """An sbatch script's own shell has SLURM_PROCID and the job's SLURM_NTASKS but no step: one
    process, not rank 0 of 16 waiting for 15 that never start."""
    from gtscale.train.launch_env import rendezvous_env

    add, note = rendezvous_env(env, no_node)
    assert add == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"} and note.startswith("no launcher")  # no port picked: none is bound
    assert rendezvous_env(env | add, no_node) == ({}, None)  # a world of one is complete without MASTER_ADDR / MASTER_PORT


def test_gtscale_train_without_a_launcher_trains_and_exits_0(tpsa_shards, tmp_path):
    """Today's code: DeepSpeed's MPI discovery, an mpi4py traceback, exit 1."""
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", max_steps=2, data=NO_WORKERS)
    launcher_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in launcher_vars and not k.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))}
    result = subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(cfg)], env=env | {"OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gtscale train: no launcher (RANK, WORLD_SIZE and SLURM_PROCID unset): training as a single process" in result.stderr
    assert "Traceback" not in result.stderr and "mpi4py" not in result.stderr
    rows = metrics(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(r["loss"] > 0 for r in rows.values())


def test_a_single_process_group_binds_no_port():
    """World size 1 rendezvous in memory: a MASTER_PORT taken by another process does not matter
    (a port picked, released and bound later can be taken in between: EADDRINUSE)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {**os.environ, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(taken.getsockname()[1])}
        code = "import torch.distributed as d; from gtscale.train.trainer import join_process_group; join_process_group(); print('world', d.get_world_size())"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "world 1" in out.stdout, out.stderr[-2000:]
