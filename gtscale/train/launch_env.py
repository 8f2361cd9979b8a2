"""Who started `gtscale train`: the torch.distributed variables a launcher sets, or what stands in.

torch.distributed's env:// rendezvous (which DeepSpeed's `init_distributed` uses) needs RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. torchrun, the deepspeed launcher and
slurm/train.sbatch set all five. When one is missing DeepSpeed falls back to MPI discovery, which
without mpi4py ends in a traceback. So, before the trainer starts:

- all five set (torchrun, deepspeed, slurm/train.sbatch): nothing changes;
- RANK or WORLD_SIZE set but not all five: a one-line error naming what is missing (a world of
  one needs no MASTER_ADDR / MASTER_PORT: it rendezvouses in memory, trainer.join_process_group);
- inside an srun step (SLURM_STEP_ID and SLURM_PROCID set) without RANK: SLURM's task variables
  are mapped as slurm/train.sbatch maps them (RANK = SLURM_PROCID, WORLD_SIZE = the step's tasks,
  LOCAL_RANK = SLURM_LOCALID, the rendezvous on the step's first node at port 20000 + job id %
  20000), keeping a MASTER_ADDR / MASTER_PORT already set;
- nothing: a single process (RANK 0 of WORLD_SIZE 1, no port: it rendezvouses in memory), said
  in one log line. Picking a free port here would be a race anyway: released before it is bound.

An sbatch script's own shell also carries SLURM_PROCID and SLURM_NTASKS (the job's, not one
process's), but no step id: `gtscale train` run there directly is a single process, not rank 0 of
a world that never starts.
"""

from __future__ import annotations

import subprocess
from typing import Callable, Mapping

from gtscale.errors import UserError

RENDEZVOUS_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
HOW_TO_START = "start with torchrun (or launch/train), srun or the deepspeed launcher, or with none of them for one process"


def slurm_first_node(nodelist: str) -> str:
    """The address of a SLURM nodelist's first node (where block distribution puts rank 0), as
    slurm/train.sbatch finds it: `scontrol show hostnames`, then that node's NodeAddr."""
    try:
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True, timeout=30).stdout.split()
        info = subprocess.run(["scontrol", "show", "node", hosts[0]], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError, IndexError):
        raise UserError(f"MASTER_ADDR: not set, and scontrol could not name the first node of {nodelist!r}; set MASTER_ADDR to rank 0's host") from None
    addresses = [word.split("=", 1)[1] for word in info.split() if word.startswith("NodeAddr=")]
    return addresses[0] if addresses else hosts[0]


def rendezvous_env(environ: Mapping[str, str], first_node: Callable[[str], str] = slurm_first_node) -> tuple[dict[str, str], str | None]:
    """(variables to add to the environment, a log line saying why, or None when a launcher set them)."""
    if "RANK" in environ or "WORLD_SIZE" in environ:
        needed = RENDEZVOUS_KEYS[:3] if environ.get("WORLD_SIZE") == "1" else RENDEZVOUS_KEYS
        missing = [key for key in needed if key not in environ]
        if missing:
            raise UserError(f"{missing[0]}: RANK/WORLD_SIZE are set but {', '.join(missing)} not; {HOW_TO_START}")
        return {}, None
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    if step is not None and "SLURM_PROCID" in environ:
        add = {
            "RANK": environ["SLURM_PROCID"],
            "WORLD_SIZE": environ.get("SLURM_STEP_NUM_TASKS", environ.get("SLURM_NTASKS", "1")),
            "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
        }
        if "MASTER_ADDR" not in environ:
            add["MASTER_ADDR"] = first_node(environ.get("SLURM_STEP_NODELIST", environ.get("SLURM_JOB_NODELIST", "")))
        if "MASTER_PORT" not in environ:
            add["MASTER_PORT"] = str(20000 + int(environ.get("SLURM_JOB_ID", "0")) % 20000)
        where = f"{add.get('MASTER_ADDR', environ.get('MASTER_ADDR'))}:{add.get('MASTER_PORT', environ.get('MASTER_PORT'))}"
        return add, f"srun step {step}: rank {add['RANK']} of {add['WORLD_SIZE']} (local rank {add['LOCAL_RANK']}) from SLURM's task variables, rendezvous at {where}"
    add = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    return add, ("no launcher (RANK, WORLD_SIZE and SLURM_PROCID unset): training as a single process; for several, start with "
                 "torchrun --nproc_per_node N (or launch/train N), srun or the deepspeed launcher")
