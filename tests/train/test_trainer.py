"""The trainer with real DeepSpeed on 2 CPU processes (gloo), started as srun would start it."""

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from launcher import NO_WORKERS, adam_state_shares, logs, metrics, run_ranks, start_ranks, wait_all, write_config

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    import psutil

    return [child.pid for child in psutil.Process(pid).children(recursive=True)]


def losses(run_dir, steps):
    rows = metrics(run_dir)
    return np.array([rows[s]["loss"] for s in steps])


def test_two_ranks_equal_one_rank_with_accumulation(tpsa_shards, tmp_path, monkeypatch):
    """2 ranks × micro-batch b ≡ 1 rank × 2 accumulated micro-batches of b (ZeRO-2), step for step.

    Rank r of the 2-rank run reads the shards that DataLoader worker r of the 1-rank run reads, and
    the DataLoader interleaves its 2 workers' batches: the same data meets the same weights.
    Neither run compiles DeepSpeed's shared-memory all-reduce (a C++ build that training never uses)."""
    extensions = tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    common = {"shuffle_buffer": 0, "bucketing": False, "sign_flip": False}
    two = write_config(tmp_path / "two.yaml", tpsa_shards, tmp_path / "two", data={"loader": {**common, "num_workers": 1, "epoch_batches": 50}})
    one = write_config(
        tmp_path / "one.yaml", tpsa_shards, tmp_path / "one",
        data={"loader": {**common, "num_workers": 2, "epoch_batches": 100}}, deepspeed={"gradient_accumulation_steps": 2},
    )
    assert run_ranks(2, [str(two)], tmp_path / "log2") == [0, 0], logs(tmp_path / "log2")
    assert run_ranks(1, [str(one)], tmp_path / "log1") == [0], logs(tmp_path / "log1")
    steps = range(1, 21)
    a, b = losses(tmp_path / "two", steps), losses(tmp_path / "one", steps)
    assert np.allclose(a, b, rtol=1e-5, atol=1e-6), np.c_[a, b]
    assert not np.allclose(a[:5], a[-5:])  # it trained
    assert not list(extensions.glob("**/deepspeed_shm_comm*"))


def test_sigkill_then_resume_repeats_every_loss_bit_for_bit(tpsa_shards, tmp_path):
    """Killed (SIGKILL: no checkpoint of its own) after its step-10 checkpoint and resumed with
    --resume auto, a run with what pretraining uses — attention dropout, a loader worker per rank,
    node-budget batches out of a shuffle buffer — logs the very losses of the uninterrupted run.
    Epochs of 12 batches put the checkpoint after the early start of the next epoch's workers: the
    resumed run starts its workers at other steps (at the resume, at the epoch's end), which must
    not move the dropout draws."""
    loader = {"batching": "node_budget", "node_budget": 512, "num_workers": 1, "shuffle_buffer": 200, "epoch_batches": 12}
    sections = dict(data={"loader": loader}, model_overrides={"num_layers": 2, "node_width": 32, "edge_width": 8, "num_heads": 4, "attention_dropout": 0.1,
                    "num_virtual_nodes": 1}, schedule={"total_steps": 30}, checkpoint={"every": 10, "keep": 2})
    ref = write_config(tmp_path / "ref.yaml", tpsa_shards, tmp_path / "ref", **sections)
    assert run_ranks(2, [str(ref)], tmp_path / "logr") == [0, 0], logs(tmp_path / "logr")

    cfg = write_config(tmp_path / "cut.yaml", tpsa_shards, tmp_path / "cut", **sections)
    procs = start_ranks(2, [str(cfg)], tmp_path / "logc")
    deadline = time.time() + 240
    while not (tmp_path / "cut" / "checkpoints" / "step-00000010" / "COMPLETE").exists() or max(metrics(tmp_path / "cut"), default=0) < 14:
        assert time.time() < deadline and all(p.poll() is None for p in procs), logs(tmp_path / "logc")
        time.sleep(0.05)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    wait_all(procs)
    killed_at = max(metrics(tmp_path / "cut"))
    assert killed_at < 30
    assert run_ranks(2, [str(cfg), "--resume", "auto"], tmp_path / "logc2") == [0, 0], logs(tmp_path / "logc2")
    steps = range(1, 31)  # each step's last row: the killed run's up to its resume point, the resumed run's after
    cut, uninterrupted = losses(tmp_path / "cut", steps), losses(tmp_path / "ref", steps)
    assert np.array_equal(cut, uninterrupted), np.c_[steps, cut, uninterrupted]


def test_sigusr1_checkpoints_and_exits_for_requeue(tpsa_shards, tmp_path):
    from gtscale.train.trainer import EXIT_PREEMPTED

    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", schedule={"total_steps": 5000})
    procs = start_ranks(2, [str(cfg), "--resume", "auto"], tmp_path / "log")  # a first start, as requeue scripts launch it
    deadline = time.time() + 240
    while max(metrics(tmp_path / "run"), default=0) < 3:
        assert time.time() < deadline and all(p.poll() is None for p in procs), logs(tmp_path / "log")
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGUSR1)  # one rank told: all ranks agree to stop at the same step
    for worker in _children(procs[0].pid):  # SLURM may signal every process of the step
        os.kill(worker, signal.SIGUSR1)
    assert wait_all(procs, timeout=120) == [EXIT_PREEMPTED, EXIT_PREEMPTED], logs(tmp_path / "log")
    tags = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if (p / "COMPLETE").exists())
    assert len(tags) == 1 and int(tags[0].split("-")[1]) == max(metrics(tmp_path / "run"))
    assert len(list((tmp_path / "run" / "checkpoints" / tags[0]).glob("zero_pp_rank_*_optim_states.pt"))) == 2


def test_zero2_partitions_optimizer_state(tpsa_shards, tmp_path):
    """Adam's state is two fp32 moments, 8 bytes per trainable parameter: ZeRO-2 holds half of it on
    each of 2 ranks (stage 1 partitions the optimizer state exactly as stage 2 does, and stage 0 not
    at all; ZeRO-3's share is checked by test_export_finetune, whose pretraining runs under it)."""
    from gtscale.format.manifest import load_manifest
    from gtscale.train.resolve import read_resolved
    from gtscale.train.task_model import build_task_model

    cfg = write_config(tmp_path / "z2.yaml", tpsa_shards, tmp_path / "z2", schedule={"total_steps": 2, "warmup_steps": 1}, deepspeed={"zero_stage": 2},
                       data=NO_WORKERS)
    assert run_ranks(2, [str(cfg)], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    shares = adam_state_shares(tmp_path / "z2", build_task_model(read_resolved(tmp_path / "z2"), load_manifest(tpsa_shards)))
    assert len(shares) == 2 and all(0.5 <= s <= 0.55 for s in shares), shares  # half each (+ the partitions' padding)


def test_loss_falls_and_metrics_equal_ogb_evaluator(tpsa_shards, tmp_path):
    from ogb.lsc import PCQM4Mv2Evaluator

    # 20-batch epochs: the next epoch's workers are already running when training ends at step 60,
    # and the processes must still exit promptly.
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", schedule={"total_steps": 60, "warmup_steps": 10}, eval={"every": 30},
                       data={"loader": {"epoch_batches": 20}})
    assert run_ranks(2, [str(cfg)], tmp_path / "log", timeout=180) == [0, 0], logs(tmp_path / "log")
    train = metrics(tmp_path / "run")
    early = np.mean([train[s]["loss"] for s in range(1, 11)])
    late = np.mean([train[s]["loss"] for s in range(51, 61)])
    assert late < 0.8 * early
    valid = metrics(tmp_path / "run", "valid")
    assert set(valid) == {30, 60}
    saved = np.load(tmp_path / "run" / "predictions" / "valid-step00000060.npz", allow_pickle=False)
    assert len(saved["idx"]) == len(set(saved["idx"].tolist())) == valid[60]["samples"] == 500
    mae = PCQM4Mv2Evaluator().eval({"y_pred": torch.from_numpy(saved["y_pred"][:, 0]), "y_true": torch.from_numpy(saved["y_true"][:, 0])})["mae"]
    assert valid[60]["mae"] == pytest.approx(float(mae), rel=1e-6)
    from gtscale.format.tario import iter_shard  # the gathered targets are the shards' labels, by idx

    labels = {r["meta"]["idx"]: r["y"][0] for shard in sorted((tpsa_shards / "valid").glob("*.tar")) for _, r in iter_shard(shard)}
    assert sorted(labels) == saved["idx"].tolist()
    assert np.array_equal(saved["y_true"][:, 0], np.array([labels[i] for i in saved["idx"]], dtype=np.float32))
    assert valid[60]["mae"] < valid[60]["mean_predictor_mae"]


def test_nonfinite_losses_stop_every_rank_with_a_message(tpsa_shards, tmp_path):
    """An absurd learning rate makes the weights overflow after the first step; every later loss is
    non-finite on both ranks, which agree to drop those micro-batches and stop after max_nonfinite."""
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", optimizer={"lr": 1.0e30}, deepspeed={"gradient_clipping": 0.0},
                       schedule={"total_steps": 50, "warmup_steps": 0}, max_nonfinite=3, data=NO_WORKERS)
    codes = run_ranks(2, [str(cfg)], tmp_path / "log", timeout=240)
    assert codes == [1, 1], logs(tmp_path / "log")
    assert "3 non-finite losses in a row" in logs(tmp_path / "log")
    assert max(metrics(tmp_path / "run")) < 50


def test_bf16_preset_trains_with_finite_losses(tpsa_shards, tmp_path):
    """The shipped DeepSpeed presets train in bf16 (DeepSpeed's bf16 engine, CPU here)."""
    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", deepspeed="zero2", schedule={"total_steps": 6, "warmup_steps": 2},
                       data=NO_WORKERS)
    assert run_ranks(1, [str(cfg)], tmp_path / "log") == [0], logs(tmp_path / "log")
    losses = [row["loss"] for row in metrics(tmp_path / "run").values()]
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert (tmp_path / "run" / "config.yaml").read_text().count("precision: bf16") == 1


def _client_state(run_dir, tag):
    # The test's own checkpoint: DeepSpeed stores client_state in the model-states file.
    return torch.load(run_dir / "checkpoints" / tag / "mp_rank_00_model_states.pt", weights_only=False)


def test_sigterm_to_the_whole_process_group_checkpoints_the_current_step(tpsa_shards, tmp_path):
    """scancel's SIGTERM reaches every process of the step, DataLoader workers included, which die.
    The run still checkpoints at the step it reached, with the loader position of the first batch not
    trained on, and exits 75. Every step evaluates here, so the stop lands on an evaluation step (or
    inside an evaluation): the checkpoint comes first, and the resumed job evaluates."""
    from gtscale.train.trainer import EXIT_PREEMPTED

    cfg = write_config(tmp_path / "c.yaml", tpsa_shards, tmp_path / "run", schedule={"total_steps": 5000}, eval={"every": 1},
                       data={"loader": {"num_workers": 2, "epoch_batches": 1000}}, checkpoint={"every": 1000})
    procs = start_ranks(2, [str(cfg), "--resume", "auto"], tmp_path / "log", own_process_group=True)
    deadline = time.time() + 240
    while max(metrics(tmp_path / "run"), default=0) < 3:
        assert time.time() < deadline and all(p.poll() is None for p in procs), logs(tmp_path / "log")
        time.sleep(0.05)
    workers = [pid for p in procs for pid in _children(p.pid)]
    assert len(workers) >= 4  # 2 loader workers per rank (train; eval ones come and go)
    os.killpg(procs[0].pid, signal.SIGTERM)
    assert wait_all(procs, timeout=120) == [EXIT_PREEMPTED, EXIT_PREEMPTED], logs(tmp_path / "log")
    import psutil

    def alive():
        living = []
        for pid in workers:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    living.append(pid)
            except psutil.NoSuchProcess:
                pass
        return living

    # a worker forked by the loader's fork server ends on its parent's death signal, a moment after
    # the rank: seen still alive at the instant the ranks had exited, once, on a loaded machine
    gone_by = time.time() + 15
    while alive() and time.time() < gone_by:
        time.sleep(0.1)
    assert not alive()
    tags = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if (p / "COMPLETE").exists())
    step = max(metrics(tmp_path / "run"))
    assert tags[-1] == f"step-{step:08d}", (tags, step)  # (older ones: new best metrics)
    state = _client_state(tmp_path / "run", tags[-1])
    assert state["step"] == step and state["eval_pending"]
    assert [rank["batches"] for rank in state["loader"]] == [step, step]  # nothing fetched ahead is lost
    assert step not in metrics(tmp_path / "run", "valid")

    # The next job evaluates the step first (here it is also the last step: max_steps).
    assert run_ranks(2, [str(cfg), f"max_steps={step}", "--resume", "auto"], tmp_path / "log2") == [0, 0], logs(tmp_path / "log2")
    assert step in metrics(tmp_path / "run", "valid")


def test_a_nonfinite_step_is_skipped_by_every_rank_and_changes_no_weight(tmp_path):
    """One training molecule has a target of 1e30 (finite in float32, so the sharder keeps it) whose
    squared error overflows float32: the step that meets it has an infinite loss on one rank; every
    rank skips that step's update (no weight changes, none becomes NaN), and the run goes on.
    Gradient clipping is off, so DeepSpeed's own overflow check does not do the skipping."""
    import csv

    from rdkit import RDConfig

    from gtscale.cli import main
    from gtscale.train.export import export

    smiles = [line.split()[0] for line in (Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi").read_text().splitlines()[:400] if line.strip()]
    with open(tmp_path / "mols.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["smiles", "y", "split"])
        for i, s in enumerate(smiles):
            writer.writerow([s, "1e30" if i == 7 else len(s), "train" if i < 300 else "valid"])
    shards = tmp_path / "shards"
    assert main(["shard", "smiles-csv", "--input", str(tmp_path / "mols.csv"), "--target-columns", "y", "--split-column", "split",
                 "--out", str(shards), "--no-progress", "--lap-k", "0"]) == 0
    cfg = write_config(tmp_path / "c.yaml", shards, tmp_path / "run", schedule={"total_steps": 24, "warmup_steps": 2},
                       data={"loader": {"epoch_batches": 8, "num_workers": 0}}, deepspeed={"gradient_clipping": 0.0},
                       checkpoint={"every": 1, "keep": 100}, task={"loss": "mse", "target_shift": 40.0, "target_scale": 20.0})
    assert run_ranks(2, [str(cfg)], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    rows = metrics(tmp_path / "run")
    skipped = [s for s, row in rows.items() if row["nonfinite_skipped"]]
    assert skipped and all(rows[s]["loss"] is None for s in skipped)  # once per epoch, where the molecule falls
    assert all(np.isfinite(row["loss"]) for s, row in rows.items() if s not in skipped)
    step = next(s for s in skipped if s > 1)  # one with a checkpoint before it
    before = torch.load(export(tmp_path / "run", f"step-{step - 1:08d}", tmp_path / "before") / "model.pt", weights_only=True)
    after = torch.load(export(tmp_path / "run", f"step-{step:08d}", tmp_path / "after") / "model.pt", weights_only=True)
    assert all(torch.equal(before[k], after[k]) for k in before)
    final = torch.load(export(tmp_path / "run", "latest", tmp_path / "final") / "model.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in final.values())
    assert not all(torch.equal(final[k], after[k]) for k in final)  # and it trained on after the skip
