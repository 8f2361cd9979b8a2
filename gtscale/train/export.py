"""Consolidated fp32 weights + the model config of a run's checkpoint (`gtscale export RUN_DIR [--tag best|latest|TAG]`).

The model config and the task come from what the run trained with (config.resolved.yaml,
resolve.read_resolved): the model config the shards completed, the head with one output per target,
target scaling as numbers.

DeepSpeed's own ZeRO consolidation (`get_fp32_state_dict_from_zero_checkpoint`) gathers the
partitions. Its torch.load calls run weights-only (safe_load), after every file of the tag has
been checked by name, so a crafted checkpoint is refused, never run. The result is a gtscale
export (gtscale.models.export: model.pt of tensors only, model.yaml, export.json).
"""

from __future__ import annotations

import json
from pathlib import Path

from gtscale.config import to_dict
from gtscale.errors import UserError
from gtscale.models.export import claim_export_dir, write_export
from gtscale.train import checkpoint, safe_load
from gtscale.train.config import TrainConfig
from gtscale.train.resolve import read_resolved
from gtscale.train.task_model import AUX_HEADS


def resolve_tag(run_dir: Path, tag: str) -> str:
    tags = checkpoint.complete_tags(run_dir / "checkpoints")
    if not tags:
        raise UserError(f"{run_dir / 'checkpoints'}: no complete checkpoint")
    if tag == "latest":
        return tags[-1]
    if tag == "best":
        best = run_dir / checkpoint.BEST_FILE
        return best_tag(best, tags) if best.is_file() else tags[-1]
    if tag not in tags:
        raise UserError(f"{run_dir / 'checkpoints'}: no complete checkpoint {tag!r} (have {', '.join(tags)})")
    return tag


def best_tag(best: Path, tags: list[str]) -> str:
    """The tag best.json names, which must be one of the complete `tags`."""
    try:
        tag = json.loads(best.read_text())["tag"]
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError) as err:
        raise UserError(f"{best}: malformed (expected JSON with a \"tag\"; {type(err).__name__}: {err}); pass --tag latest or a tag") from err
    if tag not in tags:
        raise UserError(f"{best}: names checkpoint {tag!r}, which is not a complete checkpoint (have {', '.join(tags)}); pass --tag")
    return tag


def export(run_dir: Path, tag: str, out: Path) -> Path:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a folder; name a folder for the export")
    resolved = read_resolved(run_dir)  # read before anything is written: a damaged one is one line
    tag = resolve_tag(run_dir, tag)
    claim_export_dir(out)  # before the consolidation, which takes minutes on a large model
    folder = run_dir / "checkpoints" / tag
    problems = safe_load.check_folder(folder)
    if problems:
        raise UserError(problems[0] + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""))
    if list(folder.glob("*optim_states.pt")):  # ZeRO 1-3: DeepSpeed gathers the partitions
        with safe_load.weights_only_loads():
            state = get_fp32_state_dict_from_zero_checkpoint(str(run_dir / "checkpoints"), tag=tag)
    else:  # ZeRO 0: the full fp32 module is in the model-states file
        state = safe_load.load_file(folder / "mp_rank_00_model_states.pt")["module"]
    # The auxiliary heads only shape training; the export is the backbone and task head.
    state = {k: v for k, v in state.items() if not k.startswith(AUX_HEADS)}
    record = prediction_record(resolved.train)
    model_cfg = {**resolved.model, "head": resolved.head}
    features = record.get("shards", {}).get("features", {})
    if "graph" in features and not model_cfg["head"].get("graph_features"):
        # the shards' molecule-level features were targets (task.aux_graph_feat) or unread: the
        # export does not ask predict to compute them
        record["shards"]["features"] = {k: v for k, v in features.items() if k != "graph"}
    return write_export(out, state, model_cfg, {"run_dir": str(run_dir), "tag": tag, **record})


def prediction_record(cfg: TrainConfig) -> dict:
    """What `gtscale predict` needs besides the weights: the task of the resolved `cfg` (how scores
    become predictions: target scaling as numbers) and how the run's shards were made (manifest
    transform and features), so that new molecules are featurised exactly as the training ones
    were. Empty for runs on a graph store."""
    shards = cfg.data.shards
    if not shards or not (Path(shards) / "manifest.json").is_file():
        return {}
    from gtscale.format.manifest import load_manifest

    manifest = load_manifest(shards)
    return {"task": to_dict(cfg.task), "shards": {k: manifest[k] for k in ("dataset", "transform", "task", "features") if k in manifest}}
