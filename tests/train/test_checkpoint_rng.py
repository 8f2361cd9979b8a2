"""RNG state in checkpoints: CPU generators always, the rank's CUDA generator when there is one."""

import random

import numpy as np
import pytest
import torch

from gtscale.train.checkpoint import rng_state, set_rng_state


def _draws(cuda: bool):
    out = [torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()]
    if cuda:
        out.append(torch.rand(3, device="cuda").tolist())  # dropout on a GPU draws from this one
    return out


def test_restored_state_replays_the_same_draws():
    cuda = torch.cuda.is_available()
    state = rng_state()
    assert ("cuda" in state) == cuda
    first = _draws(cuda)
    set_rng_state(state)
    assert _draws(cuda) == first


def test_a_cpu_checkpoint_restores_on_any_machine():
    state = {k: v for k, v in rng_state().items() if k != "cuda"}  # written where there was no GPU
    first = _draws(cuda=False)
    set_rng_state(state)
    assert _draws(cuda=False) == first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_state_is_the_current_devices():
    state = rng_state()
    assert torch.equal(state["cuda"], torch.cuda.get_rng_state(torch.cuda.current_device()))
