"""Loading a checkpoint never runs code, and a bad file is named: on --resume and on export."""

import json

import pytest

from bad_files import copy_run, model_states, optim_states, plant_code, truncate
from gtscale.cli import main
from launcher import NO_WORKERS, logs, run_ranks, write_config

pytestmark = pytest.mark.slow

TAGS = ["step-00000002", "step-00000004", "step-00000006"]


@pytest.fixture(scope="module")
def zero2_run(tpsa_shards, tmp_path_factory):
    """A 2-rank ZeRO-2 run with complete checkpoints at steps 2, 4 and 6 (tests copy it)."""
    root = tmp_path_factory.mktemp("zero2_run")
    cfg = write_config(root / "run.yaml", tpsa_shards, root / "run", data=NO_WORKERS, schedule={"total_steps": 6, "warmup_steps": 1}, checkpoint={"every": 2, "keep": 3})
    assert run_ranks(2, [str(cfg)], root / "log") == [0, 0], logs(root / "log")
    assert sorted(p.name for p in (root / "run" / "checkpoints").glob("step-*")) == TAGS
    return root / "run"


def resume_config(run_dir, tpsa_shards, tmp_path):
    return write_config(tmp_path / "resume.yaml", tpsa_shards, run_dir, data=NO_WORKERS, schedule={"total_steps": 6, "warmup_steps": 1}, checkpoint={"every": 2, "keep": 3})


def test_resume_auto_falls_back_past_crafted_and_corrupt_tags(zero2_run, tpsa_shards, tmp_path):
    """Newest tag: model states that would run code; next: a truncated optimizer file. Both ranks
    agree to resume from step 2, rank 0 names both files, and the planted code never ran."""
    run = copy_run(zero2_run, tmp_path / "run")
    marker = tmp_path / "marker"
    crafted = plant_code(model_states(run / "checkpoints" / TAGS[2]), marker)
    corrupt = truncate(optim_states(run / "checkpoints" / TAGS[1]))
    before = len((run / "metrics.jsonl").read_text().splitlines())
    assert run_ranks(2, [str(resume_config(run, tpsa_shards, tmp_path)), "--resume", "auto"], tmp_path / "log") == [0, 0], logs(tmp_path / "log")
    text = logs(tmp_path / "log")
    assert not marker.exists()
    assert f"{crafted}: refused: loading it would run code (posix.system" in text
    assert f"{corrupt}: not a readable checkpoint: corrupt or truncated checkpoint file (" in text
    assert text.count(f"resuming from the older complete checkpoint {TAGS[0]} instead") == 1  # rank 0 says it
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    resumed = [r["step"] for r in rows[before:] if r["split"] == "train"]
    assert resumed[0] == 3 and resumed[-1] == 6


def test_resume_of_a_named_tag_with_crafted_optimizer_states_is_refused(zero2_run, tpsa_shards, tmp_path):
    run = copy_run(zero2_run, tmp_path / "run")
    marker = tmp_path / "marker"
    crafted = plant_code(optim_states(run / "checkpoints" / TAGS[2]), marker)
    codes = run_ranks(2, [str(resume_config(run, tpsa_shards, tmp_path)), "--resume", TAGS[2]], tmp_path / "log")
    assert codes == [2, 2], logs(tmp_path / "log")
    assert f"{crafted}: refused: loading it would run code" in logs(tmp_path / "log")
    assert not marker.exists()


@pytest.mark.parametrize("which", [model_states, optim_states], ids=["model_states", "optim_states"])
def test_export_refuses_a_crafted_file(zero2_run, tmp_path, capsys, which):
    run = copy_run(zero2_run, tmp_path / "run")
    marker = tmp_path / "marker"
    crafted = plant_code(which(run / "checkpoints" / TAGS[2]), marker)
    assert main(["export", str(run), "--tag", "latest"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"gtscale export: error: {crafted}: refused: loading it would run code (posix.system is not something a DeepSpeed checkpoint holds)"]
    assert not marker.exists() and not (run / "export").exists()


def test_deepspeed_consolidation_itself_runs_weights_only(zero2_run, tmp_path):
    """The second layer: inside weights_only_loads, DeepSpeed's own torch.load(weights_only=False)
    refuses the file too (a file swapped after the check is not run)."""
    import pickle

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from gtscale.train import safe_load

    run = copy_run(zero2_run, tmp_path / "run")
    marker = tmp_path / "marker"
    plant_code(optim_states(run / "checkpoints" / TAGS[2]), marker)
    with safe_load.weights_only_loads(), pytest.raises(pickle.UnpicklingError):
        get_fp32_state_dict_from_zero_checkpoint(str(run / "checkpoints"), tag=TAGS[2])
    assert not marker.exists()


@pytest.mark.parametrize(
    "best, fragment",
    [("{not json", "malformed"), ('{"tag": "step-00000099"}', "names checkpoint 'step-00000099'"), ('["step-00000002"]', "malformed")],
)
def test_export_with_a_bad_best_json(zero2_run, tmp_path, capsys, best, fragment):
    run = copy_run(zero2_run, tmp_path / "run")
    (run / "best.json").write_text(best)
    assert main(["export", str(run)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(run / "best.json") in err[0] and fragment in err[0], err
    assert not (run / "export").exists()


def test_random_bytes_are_unreadable_not_refused(tmp_path):
    """Garbage is not a refusal: nothing in it asked to run code (it used to read "refused")."""
    import numpy as np

    from gtscale.train.safe_load import check_file

    (tmp_path / "mp_rank_00_model_states.pt").write_bytes(np.random.default_rng(0).bytes(4096))
    problem = check_file(tmp_path / "mp_rank_00_model_states.pt")
    assert "not a readable checkpoint" in problem and "refused" not in problem and "\n" not in problem, problem
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "not a readable checkpoint" in check_file(tmp_path / "empty.pt")
