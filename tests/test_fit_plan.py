"""How `gtscale fit --recipe auto` picks its members from the set's size and the budget: the exact
kernel members on small sets, the landmark kernel model (and the fine-tuned transformer where the
budget leaves it enough passes) above; what cannot fit is refused before any work, in one line."""

from __future__ import annotations

import pytest

from gtscale.errors import UserError
from gtscale.fit import RECIPES
from gtscale.fit.plan import EXACT_MOLECULES_MAX, FINETUNE_MIN_EPOCHS, plan


def test_small_sets_get_the_exact_kernel_members_and_large_ones_the_landmark_model():
    small = plan("auto", RECIPES, 2000, 1, 1600, 40.0)
    assert small.members == ("ecfp", "kernel") and small.baseline == "ecfp"
    large = plan("auto", RECIPES, 37_000, 1, 33_000, 40.0)
    assert large.members[:2] == ("forest", "landmark") and large.baseline == "forest"
    assert any(note.startswith("skipped: the exact kernel members") and f"over {EXACT_MOLECULES_MAX:,}" in note for note in large.notes)


def test_many_columns_move_a_mid_sized_set_off_the_exact_members_when_they_would_exceed_the_budget():
    one = plan("auto", RECIPES, 7800, 1, 6200, 40.0)
    twelve = plan("auto", RECIPES, 7800, 12, 6200, 20.0)
    assert one.members == ("ecfp", "kernel") and "landmark" in twelve.members
    assert any("over the budget of 20" in note for note in twelve.notes)


def test_the_fine_tuned_member_runs_when_the_budget_leaves_it_enough_passes_and_is_said_skipped_otherwise():
    tight = plan("auto", RECIPES, 40_000, 1, 32_000, 40.0)
    roomy = plan("auto", RECIPES, 40_000, 1, 32_000, 600.0)
    assert "finetune" not in tight.members and any(note.startswith("skipped: the fine-tuned transformer") for note in tight.notes)
    assert "finetune" in roomy.members and roomy.finetune_seeds == 1 and not roomy.finetune_refit
    assert roomy.finetune_steps >= FINETUNE_MIN_EPOCHS * 32_000 // 32


def test_a_named_recipe_whose_exact_matrices_cannot_fit_is_refused_and_a_budget_must_be_positive():
    with pytest.raises(UserError, match=f"--recipe kernel: .*over {EXACT_MOLECULES_MAX:,} molecules"):
        plan("kernel", RECIPES, EXACT_MOLECULES_MAX + 1, 1, EXACT_MOLECULES_MAX, 40.0)
    assert plan("landmark", RECIPES, 50_000, 3, 40_000, 40.0).members == ("forest", "landmark")
    with pytest.raises(UserError, match="--budget: 0 CPU minutes"):
        plan("auto", RECIPES, 100, 1, 80, 0.0)
