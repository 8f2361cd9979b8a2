"""The user's config is never written to: a run trains with a resolved copy, and its run directory
records both (config.yaml as given, config.resolved.yaml as trained), which evaluate, export and
resume read back, also from run directories written before config.resolved.yaml existed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher import REPO, write_config

#: One process trains `path` + overrides with the Trainer, then prints the config it passed in and a
#: fresh read of the same YAML and overrides.
TRAIN_AND_COMPARE = """
import json, os, sys
os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
from gtscale.config import to_dict
from gtscale.train.preflight import load_train_config
from gtscale.train.trainer import Trainer

path, overrides = sys.argv[1], sys.argv[2:]
given = load_train_config(path, overrides)
status = Trainer(given).fit()
fresh = load_train_config(path, overrides)
print(json.dumps({"status": status, "equal": given == fresh, "given": to_dict(given), "fresh": to_dict(fresh)}))
"""

OVERRIDES = ["data.loader.num_workers=0", "schedule.total_steps=2", "schedule.warmup_steps=1", "checkpoint.every=1"]


def flatten(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): tree}


@pytest.fixture(scope="module")
def trained(tpsa_shards, tmp_path_factory):
    """(config path, run directory, the script's report): two steps with auto target scaling."""
    root = tmp_path_factory.mktemp("resolve")
    config = write_config(root / "c.yaml", tpsa_shards, root / "run", task={"target_shift": "auto", "target_scale": "auto"})
    done = subprocess.run([sys.executable, "-c", TRAIN_AND_COMPARE, str(config), *OVERRIDES], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return config, root / "run", json.loads(done.stdout.strip().splitlines()[-1])


def test_the_config_passed_to_the_trainer_is_never_written_to(trained):
    _, _, report = trained
    assert report["status"] == 0
    given, fresh = flatten(report["given"]), flatten(report["fresh"])
    assert [key for key in sorted(given.keys() | fresh.keys()) if given.get(key) != fresh.get(key)] == []
    assert report["equal"]  # the dataclasses themselves, field by field
    assert fresh["task.target_shift"] == "auto" and fresh["task.target_scale"] == "auto"


def test_config_yaml_is_the_config_as_given_and_starts_the_same_run(trained):
    from gtscale.train.config import read_train_config

    config, run, report = trained
    assert read_train_config(run / "config.yaml", []) == read_train_config(config, OVERRIDES)
    assert yaml.safe_load((run / "config.yaml").read_text())["task"]["target_scale"] == "auto"


def test_config_resolved_yaml_is_what_the_run_trained_with(trained, tpsa_shards):
    from gtscale.format.manifest import load_manifest
    from gtscale.train.config import read_train_config
    from gtscale.train.resolve import read_resolved, resolve_config

    config, run, _ = trained
    manifest = load_manifest(tpsa_shards)
    resolved = read_resolved(run)
    assert resolved == resolve_config(read_train_config(config, OVERRIDES), manifest)
    stats = manifest["task"]["target_stats"]["train"]
    assert resolved.train.task.target_shift == stats["mean"] and resolved.train.task.target_scale == stats["std"]
    assert resolved.train.data.loader.keys == ["spd", "svd_pe", "y"] and resolved.num_targets == 1
    assert resolved.head == {"kind": "graph", "activation": "elu", "hidden": [32], "num_outputs": 1}  # egt-small's head, task.head on top
    record = yaml.safe_load((run / "config.resolved.yaml").read_text())
    assert record["world_size"] == 1 and record["backend"] == "gloo" and record["model_resolved"]["node_width"] == 32


def as_written_before(run: Path, out: Path) -> Path:
    """A copy of `run` as gtscale wrote run directories before config.resolved.yaml: config.yaml held
    the resolved record."""
    shutil.copytree(run, out, ignore=shutil.ignore_patterns("run.lock", "export", "eval"))
    (out / "config.resolved.yaml").replace(out / "config.yaml")
    return out


def test_an_older_run_directory_reads_and_exports_the_same(trained, tmp_path):
    from gtscale.train.export import export
    from gtscale.train.resolve import read_resolved

    _, run, _ = trained
    old = as_written_before(run, tmp_path / "old")
    assert read_resolved(old) == read_resolved(run)
    given_only = tmp_path / "given"  # config.yaml as given, nothing resolved: resolved again from its shards
    shutil.copytree(run, given_only, ignore=shutil.ignore_patterns("run.lock", "export", "eval", "config.resolved.yaml"))
    assert read_resolved(given_only) == read_resolved(run)
    new_export = export(run, "latest", tmp_path / "new_export")
    old_export = export(old, "latest", tmp_path / "old_export")
    for name in ("model.yaml", "export.json"):
        new, older = (yaml.safe_load((folder / name).read_text()) for folder in (new_export, old_export))
        new.pop("run_dir", None), older.pop("run_dir", None)
        assert new == older, name


def test_an_older_run_directory_resumes(trained, tmp_path):
    """A run directory written before config.resolved.yaml (a long job started by the previous
    gtscale) resumes; a changed model is named against its config.yaml's record."""
    config, run, _ = trained
    old = as_written_before(run, tmp_path / "old")

    def train(*overrides):
        return subprocess.run([sys.executable, "-m", "gtscale.cli", "train", str(config), *OVERRIDES, f"run_dir={old}", *overrides],
                              capture_output=True, text=True, cwd=REPO, timeout=600)

    changed = train("model_overrides.node_width=16", "--resume", "auto")
    assert changed.returncode == 2 and f"this config differs from {old / 'config.yaml'} in model.node_width: 32 → 16" in changed.stderr, changed.stderr
    resumed = train("schedule.total_steps=3", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (old / "checkpoints" / "step-00000003").is_dir()
    assert yaml.safe_load((old / "config.yaml").read_text())["task"]["target_shift"] == "auto"  # now the config as given …
    assert isinstance(yaml.safe_load((old / "config.resolved.yaml").read_text())["task"]["target_shift"], list)  # … beside the record
