"""The train command a sweep runs per seed."""

import sys
from pathlib import Path

from gtscale.sweep import train_command


def test_each_seed_sets_init_and_data_order_seed_and_its_own_run_dir():
    cmd = train_command("c.yaml", ["schedule.total_steps=5"], 3, Path("runs/x/seed-3"), nproc=1)
    assert cmd == [sys.executable, "-m", "gtscale.cli", "train", "c.yaml", "schedule.total_steps=5", "seed=3", "data.loader.seed=3", "run_dir=runs/x/seed-3", "--resume", "auto"]


def test_a_fixed_loader_seed_is_kept_and_nproc_goes_through_torchrun():
    cmd = train_command("c.yaml", ["data.loader.seed=7"], 1, Path("r/seed-1"), nproc=2)
    assert "data.loader.seed=1" not in cmd and "data.loader.seed=7" in cmd
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]



def test_overrides_may_follow_options(tpsa_shards, tmp_path, capsys):
    """`gtscale sweep CONFIG --label x key=value`: options and overrides in any order."""
    from gtscale.cli import main

    assert main(["sweep", "configs/tasks/nci-tpsa.yaml", "--label", "x", f"data.shards={tpsa_shards}",
                 f"run_dir={tmp_path / 'b'}", "--print-run-dir"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "b")
