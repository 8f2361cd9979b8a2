"""eval.every: epoch and eval.patience: evaluation once per pass over the train split, and an
early stop that every rank takes at the same step, kept on resume; the best checkpoint survives."""

import json

import pytest

from gtscale.train.eval_schedule import Patience, eval_interval

from launcher import logs, metrics, run_ranks, write_config


def test_epoch_interval_is_one_pass_in_optimizer_steps():
    assert eval_interval("epoch", 75, 1) == 75 and eval_interval("epoch", 75, 4) == 18
    assert eval_interval("epoch", 3, 4) == 1  # at least every step
    assert eval_interval(0, 75, 1) == 0 and eval_interval(150, 75, 1) == 150


def test_patience_counts_evaluations_since_the_last_new_best():
    p = Patience(2)
    for improved, exhausted in [(True, False), (False, False), (True, False), (False, False), (False, True)]:
        p.update(improved)
        assert p.exhausted == exhausted
    assert not any(Patience(0, since_best=100).exhausted for _ in [0])  # 0 = never
    warming = Patience(1)
    warming.update(False, counts=False)  # during the learning-rate warm-up
    assert not warming.exhausted
    warming.update(False)
    assert warming.exhausted


@pytest.mark.slow
def test_two_ranks_stop_together_after_patience_and_a_resume_trains_no_further(nci_shards, tmp_path):
    # lr 0: the weights never change, so after the first evaluation none is better (ties are not);
    # the evaluation at step 4 falls in the warm-up and does not count against patience
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", nci_shards, run, optimizer={"lr": 0.0}, schedule={"total_steps": 40, "warmup_steps": 4, "min_lr": 0.0},
                       data={"loader": {"epoch_batches": 2, "num_workers": 0}}, task={"evaluator": "regression", "target_shift": "auto", "target_scale": "auto"},
                       eval={"every": "epoch", "patience": 2}, checkpoint={"every": 1000, "keep": 1}, model_overrides={"svd_rank": 4})
    assert run_ranks(2, [str(cfg)], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    assert sorted(metrics(run, "valid")) == [2, 4, 6, 8]  # one evaluation per 2-batch epoch; stopped at the 2nd counted without improvement
    assert max(metrics(run)) == 8
    assert json.loads((run / "best.json").read_text())["tag"] == "step-00000002"
    tags = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert tags == ["step-00000002", "step-00000008"]  # the best kept beside the newest (keep 1)
    assert "no better mae in 2 evaluations (best" in logs(tmp_path / "log")
    assert run_ranks(2, [str(cfg), "--resume", "auto"], tmp_path / "log2") == [0, 0], logs(tmp_path / "log2")
    assert max(metrics(run)) == 8 and sorted(metrics(run, "valid")) == [2, 4, 6, 8]


def test_evaluations_before_min_steps_do_not_use_up_patience(nci_shards, tmp_path):
    # as above, in one process: evaluations every 2 steps, none better after the first; patience 2
    # counts only those after step 12, so the run stops at step 16, not at step 8
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", nci_shards, run, optimizer={"lr": 0.0}, schedule={"total_steps": 40, "warmup_steps": 4, "min_lr": 0.0},
                       data={"loader": {"epoch_batches": 2, "num_workers": 0}}, task={"evaluator": "regression", "target_shift": "auto", "target_scale": "auto"},
                       eval={"every": "epoch", "patience": 2, "min_steps": 12}, checkpoint={"every": 1000, "keep": 1}, model_overrides={"svd_rank": 4})
    assert run_ranks(1, [str(cfg)], tmp_path / "log") == [0], logs(tmp_path / "log")
    assert sorted(metrics(run, "valid")) == [2, 4, 6, 8, 10, 12, 14, 16]
