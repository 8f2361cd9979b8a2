"""Token and pair packing: per-token and per-pair layers run on real rows only.

A Batch is padded to its largest graph, and molecules of PCQM4Mv2's size distribution fill only
about half of a padded batch's token slots and a third of its pair slots. Linear layers, layer
norms and FFNs act on each token (or pair) independently, so running them on the packed real
rows gives exactly the padded result on real rows while skipping the padding's FLOPs. Only
attention needs a dense layout; models unpack into it and pack out of it around attention.

Pairs cross to attention channels-major: a packed [P, C] tensor, transposed to [C, P] (which a
linear layer can produce directly), scatters row by row into [C, B, M, M], so each head's
attention map is one contiguous [B, M, M] block and no strided scatter or permuted copy of an
N² tensor is needed.

Padding rows of an unpacked tensor are zero, which is also what the models return for padding.
"""

from __future__ import annotations

import torch


class Packing:
    """Flat indices of the real tokens and real (token, token) pairs of a dense [B, M] layout."""

    def __init__(self, mask: torch.Tensor, pairs: bool = True):
        """mask: bool [B, M], True on real tokens. pairs: also index the [B, M, M] pairs."""
        self.num_graphs, self.size = mask.shape
        self.tokens = mask.reshape(-1).nonzero().squeeze(1)  # long [T]: b*M + i
        self.pairs = None
        if pairs:
            pair_mask = mask[:, :, None] & mask[:, None, :]
            self.pairs = pair_mask.reshape(-1).nonzero().squeeze(1)  # long [P]: (b*M + i)*M + j

    @property
    def num_tokens(self) -> int:
        return self.tokens.numel()

    def pack_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """[B, M, C] → [T, C]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.tokens)

    def unpack_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """[T, C] → [B, M, C], zeros on padding."""
        dense = x.new_zeros(self.num_graphs * self.size, x.shape[-1])
        dense.index_copy_(0, self.tokens, x)  # in place: an out-of-place index_copy clones the zeros
        return dense.view(self.num_graphs, self.size, -1)

    def pack_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[B, M, M, C] → [P, C]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.pairs)

    def unpack_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[P, C] → [B, M, M, C], zeros on padding pairs."""
        n = self.num_graphs * self.size * self.size
        dense = x.new_zeros(n, x.shape[-1])
        dense.index_copy_(0, self.pairs, x)
        return dense.view(self.num_graphs, self.size, self.size, -1)

    def pairs_to_channels(self, x: torch.Tensor) -> torch.Tensor:
        """[C, P] → [C, B, M, M], zeros on padding pairs."""
        n = self.num_graphs * self.size * self.size
        dense = x.new_zeros(x.shape[0], n)
        dense.index_copy_(1, self.pairs, x)
        return dense.view(-1, self.num_graphs, self.size, self.size)

    def channels_to_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[C, B, M, M] → [C, P]: the inverse of `pairs_to_channels`."""
        return x.reshape(x.shape[0], -1).index_select(1, self.pairs)
