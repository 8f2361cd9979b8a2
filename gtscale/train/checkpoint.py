"""Checkpoints that survive preemption: DeepSpeed's own format plus a completion marker.

A checkpoint is `<run>/checkpoints/step-00001200/`, written by `engine.save_checkpoint` on every
rank (each saves its ZeRO partition). Only after every rank has returned does rank 0 write the
tag's `COMPLETE` file (atomically); resuming picks the newest tag that has one, so a kill during
saving leaves the previous checkpoint in charge. DeepSpeed's own `latest` file is not trusted for
the same reason.

What DeepSpeed does not know travels in its `client_state`: the step, each rank's loader position
and RNG states (CPU, and CUDA of the rank's device; gathered to every rank before saving, since only rank 0 writes client_state), the
best metric so far and the running target mean.
"""

from __future__ import annotations

import errno
import json
import pickle
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from gtscale.config import load_yaml
from gtscale.errors import UserError
from gtscale.io import atomic_write_text
from gtscale.models.config import current_field_names
from gtscale.train import safe_load

COMPLETE = "COMPLETE"
BEST_FILE = "best.json"


def tag_of(step: int) -> str:
    return f"step-{step:08d}"


def complete_tags(root: Path) -> list[str]:
    """Tags with a COMPLETE marker, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / COMPLETE).is_file())


def rng_state() -> dict:
    """This rank's generators: CPU torch, numpy, Python, and (with CUDA) its current device's."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()  # the device set by torch.cuda.set_device(LOCAL_RANK)
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():  # a CPU checkpoint resumed on GPUs has none
        torch.cuda.set_rng_state(state["cuda"])


def gather_to_all(obj) -> list:
    """[obj of rank 0, obj of rank 1, …] on every rank (a plain list when not distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def save(engine, root: Path, step: int, client_state: dict, keep: int, protected: set[str]) -> str:
    """Save on every rank, mark complete on rank 0, prune old tags beyond `keep` (not `protected`)."""
    tag = tag_of(step)
    if not dist.is_initialized() or dist.get_rank() == 0:
        # Saving over an existing tag (after --resume from an older one): it is not complete
        # again until every rank has rewritten it.
        (root / tag / COMPLETE).unlink(missing_ok=True)
    if dist.is_initialized():
        dist.barrier()
    try:
        engine.save_checkpoint(str(root), tag=tag, client_state=client_state)
    except (OSError, RuntimeError) as err:
        raise _save_failure(engine, root, tag, err) from None
    if dist.is_initialized():
        dist.barrier()
    if not dist.is_initialized() or dist.get_rank() == 0:
        try:
            atomic_write_text(root / tag / COMPLETE, json.dumps({"step": step}))
        except OSError as err:
            raise _save_failure(engine, root, tag, err) from None
        for old in complete_tags(root)[:-keep] if keep > 0 else []:
            if old not in protected and old != tag:
                shutil.rmtree(root / old, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    return tag


def _save_failure(engine, root: Path, tag: str, err: Exception) -> Exception:
    """A full disk while saving → one line naming the folder and its free space (UserError); any
    other failure is returned as it was. torch.save on a full disk raises a RuntimeError that does
    not say so ("unexpected pos …"), so the disk counts as full when its free space is below the
    model's own bytes, which the first file written holds at least.

    A single process removes the incomplete tag it was writing (gtscale's own, and no COMPLETE
    marker); with several ranks another may still be writing there, so it stays, and resuming skips
    it (no COMPLETE marker). The failing rank exits; the launcher ends the others."""
    free = shutil.disk_usage(root).free if root.is_dir() else 0
    needed = sum(getattr(p, "ds_numel", p.numel()) * p.element_size() for p in engine.module.parameters())
    full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
    if not (full or (isinstance(err, RuntimeError) and free < needed)):
        return err
    alone = not dist.is_initialized() or dist.get_world_size() == 1
    if alone:
        shutil.rmtree(root / tag, ignore_errors=True)
    previous = [t for t in complete_tags(root) if t != tag]
    kept = f"{previous[-1]} stays the newest complete checkpoint" if previous else "no earlier checkpoint exists"
    return UserError(f"{root / tag}: disk full while checkpointing ({free / 2**20:.1f} MiB free there, the model alone needs "
                     f"{needed / 2**20:.1f} MiB); {'removed the incomplete checkpoint' if alone else 'the incomplete checkpoint is skipped on resume'}, "
                     f"{kept}; free space, then resume with --resume auto")


def restore(engine, root: Path, candidates: list[str], fallback: bool) -> tuple[str, dict]:
    """Load the newest of `candidates` whose files all verify; return (tag, client_state).

    Every file is first opened weights-only (safe_load.check_folder), split among the ranks, and the
    problems are gathered to every rank: all ranks then hold the same list and take the same
    decision. (Each rank checking every file itself would read the checkpoint once per rank, and
    ranks on different nodes could see different bytes of a file still being copied; one
    all-gather, which every rank reaches because checking never raises, is cheaper and agrees by
    construction.) With `fallback` (--resume auto) a tag with a bad file gives way, announced on
    rank 0, to the newest older complete one; without it (an explicit tag) the first problem is the
    error."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    for tag in reversed(candidates):
        folder = root / tag
        problems = [p for per_rank in gather_to_all(safe_load.check_folder(folder, rank, world)) for p in per_rank]
        if not problems:
            return tag, load(engine, root, tag)
        older = candidates[: candidates.index(tag)]
        if not (fallback and older):
            more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
            raise UserError(problems[0] + more)
        if rank == 0:
            print(f"warning: {problems[0]}; resuming from the older complete checkpoint {older[-1]} instead", file=sys.stderr, flush=True)
    raise UserError(f"{root}: no complete checkpoint to resume from")


def load(engine, root: Path, tag: str) -> dict:
    """Restore model, optimizer and scheduler of `tag`, every torch.load weights-only; return its client_state."""
    with safe_load.weights_only_loads():
        try:
            path, client_state = engine.load_checkpoint(str(root), tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
        except pickle.UnpicklingError as err:  # a file changed after it was checked
            raise UserError(safe_load.describe_failure(root / tag, err)) from err
        except RuntimeError as err:  # torch's load_state_dict: "size mismatch for <name>: … shape …"
            mismatches = [line.strip() for line in str(err).splitlines() if "size mismatch for" in line]
            if not mismatches:
                raise
            raise ModelMismatch(f"{root / tag}: the model's parameter shapes differ from the checkpoint's: "
                                f"{_shapes(mismatches[0])}" + (f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else "")) from None
    if path is None:
        raise UserError(f"{root / tag}: DeepSpeed could not load this checkpoint")
    return client_state


class ModelMismatch(UserError):
    """The checkpoint holds another model than the one configured (a resume after editing the model)."""


def _shapes(line: str) -> str:
    """torch's "size mismatch for w: copying a param with shape torch.Size([64]) from checkpoint, the
    shape in current model is torch.Size([32])." → "w [64] in the checkpoint, [32] configured"."""
    name = line.split("size mismatch for ", 1)[1].split(":", 1)[0]
    shapes = re.findall(r"torch\.Size\(\[([^\]]*)\]\)", line)
    if len(shapes) != 2:
        return line
    return f"{name} [{shapes[0]}] in the checkpoint, [{shapes[1]}] configured"


def model_changes(run_config: Path, model_cfg: dict, head: dict) -> list[str]:
    """The model and head settings that differ between the run's record `run_config` (its
    config.resolved.yaml: what the checkpoints were trained with) and this job's, as
    "key: recorded → now"; [] without a record."""
    if not run_config.is_file():
        return []
    recorded = load_yaml(run_config)
    model = recorded.get("model_resolved") or {}
    model = current_field_names(model, f"{run_config}: model_resolved") if isinstance(model, dict) else model  # a record of any age
    before = _flatten({"model": model, "task.head": (recorded.get("task") or {}).get("head") or {}})
    now = _flatten({"model": model_cfg, "task.head": head})
    return [f"{key}: {before.get(key)!r} → {now.get(key)!r}" for key in sorted(before.keys() | now.keys()) if before.get(key) != now.get(key)]


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _flatten(value, f"{name}.")
        else:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out
