"""Packing from the loader's indices: round trips, virtual-token layouts derived by arithmetic
equal the real rows of the prepended mask, and trash entries (rounded-up index lists) change
nothing, in values or gradients, as long as packed rows reach outputs only through unpacking."""

import pytest
import torch
import torch.nn.functional as F

from gtscale.loader.batch import Batch, packing_indices
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
    assert sorted(pack.tokens.tolist()) == real.reshape(-1).nonzero().squeeze(1).tolist()
    real_pairs = (real[:, :, None] & real[:, None, :]).reshape(-1).nonzero().squeeze(1)
    assert sorted(pack.pairs.tolist()) == real_pairs.tolist()


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
