"""A bad training config is refused before any process group starts: one line, exit status 2."""

import subprocess
import sys

import pytest

from launcher import REPO, write_config


def train_cli(*args):
    return subprocess.run([sys.executable, "-m", "gtscale.cli", "train", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize(
    "override,needle",
    [
        ("optimizer.lrr=0.1", "optimizer.lrr: unknown key"),
        ("optimizer.lr=fast", "optimizer.lr: expected a number"),
        ("deepspeed.zero_stage=4", "deepspeed.zero_stage: must be in 0..3"),
        ("data.shards=/nonexistent/shards", "/nonexistent/shards/manifest.json not found"),
        ("data.loader.batching=bytes", "data.loader.batching"),
        ("deepspeed=zero9", "no preset 'zero9'"),
        ("init_from=/nope/model.pt", "init_from: /nope/model.pt: no such export"),
        ("init_from=moses-nope", "init_from: moses-nope: no such export (a folder or model.pt written by `gtscale export`), nor a shipped backbone"),
        ("model=egt-huge", "egt-huge: no such model config"),
        ("task.evaluator=ogbg-nope", "task.evaluator: 'ogbg-nope'"),
        ("task.metric=rocauc", "task.metric: 'rocauc' is not reported by evaluator 'pcqm4mv2'"),
        ("data.eval_split=test-dev", "data.eval_split: 'test-dev' is not a split"),
        ("task.target_scale=0", "task.target_scale: must be > 0"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tpsa_shards, tmp_path, override, needle):
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run")
    result = train_cli(str(cfg), override)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_deepspeed_preset_and_overrides(tpsa_shards, tmp_path):
    from gtscale.train.preflight import load_train_config

    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", deepspeed="zero3-offload")
    loaded = load_train_config(cfg, ["deepspeed.precision=fp32"])
    assert loaded.deepspeed.zero_stage == 3 and loaded.deepspeed.offload_optimizer and loaded.deepspeed.precision == "fp32"


def test_warmup_cosine_schedule():
    from gtscale.train.engine_config import warmup_cosine

    factors = [warmup_cosine(s, 10, 110, 0.1) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[10] == pytest.approx(1.0) and factors[60] == pytest.approx(0.55) and factors[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))


def test_exponent_floats_without_a_point_are_numbers(tmp_path):
    """PyYAML (YAML 1.1) reads `1e-5` as a string; gtscale's configs read it as YAML 1.2 does."""
    from gtscale.config import apply_overrides, load_yaml

    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-5\nname: 1e5x\n")
    assert load_yaml(path) == {"lr": 1e-5, "name": "1e5x"}
    assert apply_overrides({}, ["schedule.min_lr=2E-6", "a=-3e+2"]) == {"schedule": {"min_lr": 2e-6}, "a": -300.0}


def test_deepspeed_extra_merges_deeply_and_refuses_what_gtscale_sets(tpsa_shards, tmp_path):
    """extra.zero_optimization adds to gtscale's zero_optimization (it used to replace it, dropping
    `stage`); a key gtscale sets itself is refused naming its dotted path."""
    from gtscale.errors import UserError
    from gtscale.train.preflight import load_train_config
    from gtscale.train.engine_config import deepspeed_config, merge_extra

    cfg = load_train_config(write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run"),
                            ["deepspeed.zero_stage=1", "deepspeed.extra={zero_optimization: {reduce_bucket_size: 1000}, steps_per_print: 5}"])
    ds = deepspeed_config(cfg, world_size=2, micro_batch=4)
    assert ds["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 1000} and ds["steps_per_print"] == 5
    assert ds["train_batch_size"] == 8
    with pytest.raises(UserError, match=r"^deepspeed\.extra\.optimizer\.params\.lr: set by gtscale itself \(optimizer\.lr\)"):
        merge_extra(ds, {"optimizer": {"params": {"lr": 1.0}}})


def sections(cls: type) -> set[type]:
    """The dataclass `cls` and every dataclass its fields hold, however deep (Optional[...] included)."""
    import dataclasses
    import typing

    found, todo = set(), [cls]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        hints = typing.get_type_hints(current)
        for f in dataclasses.fields(current):
            todo += [t for t in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(t)]
    return found


def test_every_config_section_is_a_value(tmp_path):
    """Writing to any section of a training config, the config itself or the resolved one raises:
    "never written to" is a property of the types, not a convention."""
    import dataclasses

    from gtscale.config import from_dict
    from gtscale.loader.config import LoaderConfig
    from gtscale.train.config import GraphDataConfig, ResolvedConfig, TaskConfig, TrainConfig

    found = sections(TrainConfig)
    assert {TrainConfig, TaskConfig, LoaderConfig, GraphDataConfig} <= found
    assert [cls.__name__ for cls in found if not cls.__dataclass_params__.frozen] == []
    assert ResolvedConfig.__dataclass_params__.frozen
    cfg = from_dict(TrainConfig, {"data": {"shards": str(tmp_path)}, "model": "egt-small"})
    for target, name in ((cfg, "seed"), (cfg.task, "loss"), (cfg.data, "shards"), (cfg.data.loader, "seed"), (cfg.schedule, "total_steps")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(target, name, getattr(target, name))
