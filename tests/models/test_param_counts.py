"""Every size in configs/models/ builds, and the paper sizes have the papers' parameter counts
(model plus the YAML's head, as the papers count them). Construction only: no forward passes."""

import functools
import gc

import pytest

from gtscale.models import build_head, build_model, load_model_config

#: config → (published count, source). EGT: the authors' code counts (README and paper Table 8);
#: Graphormer: the paper's PCQM4M table (small, base) and its ZINC table (slim).
PUBLISHED = {
    "egt-small": (11.46e6, "EGT Table 8"),
    "egt-medium": (47.41e6, "EGT Table 8"),
    "egt-large": (89.32e6, "EGT Table 8"),
    "egt-larger": (110.69e6, "EGT Table 8"),
    "graphormer-small": (12.5e6, "Graphormer Table 1"),
    "graphormer-base": (47.1e6, "Graphormer Table 1"),
    "graphormer-slim": (489e3, "Graphormer Table 3 (ZINC)"),
}


@functools.cache
def _count(name: str) -> tuple[int, int]:
    cfg = load_model_config(name)
    model = build_model(cfg)
    head = build_head(cfg["head"], model)
    counts = sum(p.numel() for p in model.parameters()), sum(p.numel() for p in head.parameters())
    del model, head
    gc.collect()
    return counts


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_paper_sizes_match_published_counts(name):
    published, source = PUBLISHED[name]
    model, head = _count(name)
    assert abs(model + head - published) / published < 0.03, f"{name}: {model + head:,} vs {published:,.0f} ({source})"


def test_egt_counts_equal_the_authors_code_exactly():
    # EGT_PCQM4MV2 of shamim-hussain/egt_pytorch, counted layer by layer.
    assert sum(_count("egt-small")) == 11_463_809
    assert sum(_count("egt-larger")) == 110_691_201


@pytest.mark.parametrize("name", ["egt-bench-100k", "egt-bench-500k", "graphormer-large"])
def test_other_sizes_build(name):
    model, head = _count(name)
    assert model > 0 and head > 0
