"""Fast kernels: faster ways to compute what the models' plain torch code computes.

Every model module writes its math in plain torch (EGT's gated attention in egt.py, Graphormer's
biased attention in graphormer.py, dropout masks in layers.py, weight products as F.linear in
linear.py). That reference form is what the models mean and what the tests check each kernel
against (tests/models/test_kernels.py, test_linear.py). A kernel here computes the same function
faster on some hardware; deleting one, with the `use_kernel` test at its call site, changes speed,
never the function: results agree to float rounding, and dropout masks are drawn by the caller,
so both forms drop the same entries (except under SDPA's own dropout on a GPU, sdpa.py).

The kernels, what each speeds up, where, and the benchmark behind it (docs/results/cpu-speed.md):

- `linear` (linear.py): fp32 weight products through oneDNN instead of MKL, on a CPU. MKL runs a
  generic path on AMD EPYC; oneDNN gets 2-3× its GFLOP/s per product there, and made egt-small's
  eager step 1.26× and graphormer-base's 1.43× faster (AVX-512 Zen 5, "Weight products").
- `dropout_mask` (dropout.py): the comparison that turns 16-bit draws into a keep mask, kept out
  of inductor's fusion in compiled CPU models; fused, it left EGT's gate-and-dropout loop scalar
  (~8 ms a layer of a compiled egt-small step).
- `gated_attention` (gated_attention.py): EGT's eq. 4 and 8-9 with a hand-written backward that
  keeps less and makes fewer passes over the attention maps: opaque custom ops on a CPU (the
  compiled egt-small step went from 0.98× to 1.04× eager, "EGT's attention core"), an
  autograd.Function that inductor fuses on a GPU (not measured against the reference).
- `sdpa` (sdpa.py): Graphormer's attention through torch's fused scaled_dot_product_attention:
  flash / memory-efficient kernels on a GPU (not measured against the reference); on a CPU only
  without attention dropout (with it, SDPA draws its masks with torch's slow bernoulli sampler).

Measured against the reference on a loaded 2-core AVX-512 EPYC ("Fast kernels against the
reference"), no kernel changed an eager one-thread step's CPU time by more than 2 % (the gated
attention kernel saved 14 % of the attention's own time and 45 MiB of a step's peak); the figures
above came from a lightly loaded one. On a GPU no kernel has been measured against the reference.

Which kernels run is chosen here, once: `GTSCALE_KERNELS` in the environment (read at import) is
`fast` (the default: every kernel, each where it applies), `reference` (none: the plain torch
code everywhere) or a comma-separated list of kernel names (those and no others); `using(spec)`
sets the same for a block of code (benchmarks, tests). `gtscale bench model --kernels fast
reference` measures the choices side by side.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from gtscale.errors import UserError

#: Every kernel by name.
KERNELS = ("linear", "dropout_mask", "gated_attention", "sdpa")


def parse(spec: str) -> frozenset[str]:
    """The kernels a selection names: `fast`, `reference` or a comma-separated list of KERNELS."""
    if spec == "fast":
        return frozenset(KERNELS)
    if spec == "reference":
        return frozenset()
    names = {name.strip() for name in spec.split(",")}
    unknown = sorted(names - set(KERNELS))
    if unknown or not spec.strip():
        raise UserError(f"GTSCALE_KERNELS / --kernels {spec!r}: say fast, reference or a comma-separated list of {', '.join(KERNELS)}")
    return frozenset(names)


# A bad value in the environment is reported at the first model step, as one line, rather than
# at import, where the command line could not catch it.
try:
    _selected, _error = parse(os.environ.get("GTSCALE_KERNELS", "fast")), None
except UserError as err:
    _selected, _error = frozenset(), err


def use_kernel(name: str) -> bool:
    """Whether kernel `name` runs (where it applies) instead of the reference code."""
    if _error is not None:
        raise _error
    return name in _selected


@contextmanager
def using(spec: str) -> Iterator[None]:
    """Run the block with the kernels `spec` names (see `parse`), then restore the selection."""
    global _selected, _error
    before = _selected, _error
    _selected, _error = parse(spec), None
    try:
        yield
    finally:
        _selected, _error = before
