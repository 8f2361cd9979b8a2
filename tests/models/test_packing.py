"""Packing from the loader's indices: round trips, virtual-token layouts derived by arithmetic
equal the real rows of the prepended mask, and trash entries (rounded-up index lists) change
nothing, in values or gradients, as long as packed rows reach outputs only through unpacking."""

import pytest
import torch
import torch.nn.functional as F

from gtscale.loader.batch import Batch, packing_indices, rounded_length
from gtscale.models.packing import Packing

MASK = torch.tensor([[True, True, False, False], [True, False, False, False], [True, True, True, True]])


def _batch(mask: torch.Tensor, full: bool = False) -> Batch:
    b, n = mask.shape
    tokens, pairs = packing_indices(mask, full)
    return Batch(node_feat=torch.zeros(b, n, 1, dtype=torch.long), node_mask=mask, edge_feat=torch.zeros(b, n, n, 1, dtype=torch.long),
                 token_index=tokens, pair_index=pairs)


def test_round_trips():
    torch.manual_seed(0)
    pack = Packing.for_batch(_batch(MASK))
    assert pack.num_tokens == 7 and pack.pairs.numel() == 4 + 1 + 16
    x = torch.randn(3, 4, 2)
    dense = pack.unpack_tokens(pack.pack_tokens(x))
    torch.testing.assert_close(dense[MASK], x[MASK])
    assert dense[~MASK].abs().sum() == 0
    pairs = torch.randn(pack.pairs.numel(), 5)
    channels = pack.pairs_to_channels(pairs.t())  # [5, B, M, M]
    torch.testing.assert_close(channels.permute(1, 2, 3, 0), pack.unpack_pairs(pairs))
    torch.testing.assert_close(pack.channels_to_pairs(channels), pairs.t())
    torch.testing.assert_close(pack.pack_pairs(pack.unpack_pairs(pairs)), pairs)


@pytest.mark.parametrize("num_virtual", [1, 3])
def test_virtual_layout_indexes_exactly_the_real_rows_of_the_prepended_mask(num_virtual):
    pack = Packing.for_batch(_batch(MASK), num_virtual)
    real = F.pad(MASK, (num_virtual, 0), value=True)
    assert pack.size == MASK.shape[1] + num_virtual
    b, m = real.shape
    real_tokens = real.reshape(-1).nonzero().squeeze(1)
    real_pairs = (real[:, :, None] & real[:, None, :]).reshape(-1).nonzero().squeeze(1)
    # every real row once, then trash entries (the layout's size) up to rounded_length
    assert sorted(pack.tokens.tolist()) == real_tokens.tolist() + [b * m] * (rounded_length(real_tokens.numel()) - real_tokens.numel())
    assert sorted(pack.pairs.tolist()) == real_pairs.tolist() + [b * m * m] * (rounded_length(real_pairs.numel()) - real_pairs.numel())


def test_rounded_lengths_are_sixteen_per_octave_and_at_most_a_sixteenth_longer():
    lengths = [rounded_length(n) for n in range(1, 5000)]
    assert lengths[:31] == list(range(1, 32))  # exact below 32
    assert all(n <= r <= n + n / 16 for n, r in zip(range(1, 5000), lengths))
    assert len(set(r for r in lengths if 1024 <= r < 2048)) == 16
    mask = torch.ones(3, 20, dtype=torch.bool)
    mask[2, 10:] = False  # 50 real tokens, 900 real pairs
    tokens, pairs = packing_indices(mask)
    assert (tokens.numel(), pairs.numel()) == (rounded_length(50), rounded_length(900)) == (50, 928)
    assert (pairs[900:] == 3 * 20 * 20).all()  # trash: the layout's size
    full = packing_indices(torch.ones(3, 20, dtype=torch.bool))
    assert (full[0].numel(), full[1].numel()) == (60, 1200)  # never past the longest possible list


@pytest.mark.parametrize("num_virtual", [0, 2])
def test_trash_entries_change_no_value_and_no_gradient(num_virtual):
    torch.manual_seed(0)
    exact, padded = (Packing.for_batch(_batch(MASK, full), num_virtual) for full in (False, True))
    assert padded.num_tokens > exact.num_tokens and padded.pairs.numel() > exact.pairs.numel()
    x = torch.randn(3, MASK.shape[1] + num_virtual, 6, requires_grad=True)
    e = torch.randn(3, MASK.shape[1] + num_virtual, MASK.shape[1] + num_virtual, 6, requires_grad=True)
    weight = torch.randn(6, 6)

    def run(pack):
        h = pack.unpack_tokens(torch.tanh(pack.pack_tokens(x) @ weight))
        c = pack.pairs_to_channels((torch.tanh(pack.pack_pairs(e) @ weight)).t())
        # packed rows reach the loss only through unpacking, as in the models
        loss = (h ** 2).sum() + (pack.unpack_pairs(pack.channels_to_pairs(c * 3).t()) ** 2).sum() + (c ** 3).sum()
        return [h, c] + list(torch.autograd.grad(loss, (x, e)))

    for a, b in zip(run(exact), run(padded)):
        torch.testing.assert_close(a, b)
