"""launch/gpu-lease (gpu-speed and MOSES sharding at once, then gpu-pretrain on those shards): its
refusals. Its parts run whole on the CPU in test_gpu_speed.py and test_gpu_pretrain.py; the lease
itself ran as `launch/gpu-lease --cpu-smoke` (docs/speed.md) and on the device."""

import subprocess

from test_gpu_pretrain import MOSES, REPO, launch_env


def test_without_cuda_it_refuses_in_one_line_and_writes_nothing(tmp_path):
    result = subprocess.run([str(REPO / "launch" / "gpu-lease"), "--out", str(tmp_path / "out"), "--moses", str(MOSES)],
                            env=launch_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "gpu-lease: no CUDA device visible (--cpu-smoke runs the same sequence on the CPU)"], result.stderr
    assert not (tmp_path / "out").exists()


def test_speed_cores_must_leave_the_sharder_one(tmp_path):
    result = subprocess.run([str(REPO / "launch" / "gpu-lease"), "--cpu-smoke", "--out", str(tmp_path / "out"), "--moses", str(MOSES),
                             "--speed-cores", "4096"], env=launch_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1 and "leaves none of the" in result.stderr, result.stderr
