"""Disk full while sharding: one line naming the path and the free space, exit 2,
no half-written `.tar.tmp` (or other temporary) left; a rerun with space completes the run.

A real ENOSPC from a 2 MiB tmpfs (the tests run as root; skipped where mounting is not allowed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gtscale.cli import main


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


ARGS = ["shard", "nci-tpsa", "--shard-size", "400", "--lap-k", "0", "--svd-rank", "0", "--no-progress"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_disk_full_is_one_line_and_leaves_no_temporary(small_disk, capsys, workers):
    out = small_disk / "out"
    assert main([*ARGS, "--out", str(out), "--workers", workers]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "no space left on the device" in err[0] and " free there" in err[0], err
    assert str(out / "train") in err[0] or str(out / "parts") in err[0] or str(out / "valid") in err[0], err
    assert not [p for p in small_disk.rglob("*") if p.name.endswith(".tmp")]
    # the run resumes where it stopped once there is room
    shutil.copytree(out, small_disk.parent / "roomy")
    assert main([*ARGS, "--out", str(small_disk.parent / "roomy"), "--workers", workers]) == 0
