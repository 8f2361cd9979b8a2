"""Token and pair packing: per-token and per-pair layers run on real rows only.

A Batch is padded to its largest graph, and molecules of PCQM4Mv2's size distribution fill only
about half of a padded batch's token slots and a third of its pair slots. Linear layers, layer
norms and FFNs act on each token (or pair) independently, so running them on the packed real
rows gives exactly the padded result on real rows while skipping the padding's FLOPs. Only
attention needs a dense layout; models unpack into it and pack out of it around attention.

The indices come with the batch (Batch.token_index / pair_index, computed by the loader), so a
forward pass never asks the device which rows are real: no host synchronisation and no
data-dependent shape, which is what lets a whole model compile as one graph. A model that prepends
V virtual tokens derives the indices of its [B, V+N] layout from the batch's [B, N] ones with
arithmetic on index tensors (`for_batch`).

Index lists may be longer than the real rows (the loader rounds their lengths up so that shapes
repeat, loader/batch.py: rounded_length, and `for_batch` rounds the virtual-token layouts' again): an index equal to the layout's size names a *trash* row. Packing
reads some real row into it (finite, never used); unpacking writes it to one extra row past the
end, which is cut off, so it reaches no output and no gradient. That holds because packed rows
reach a model's outputs only through unpacking (per-row layers keep rows apart); a reduction over
packed rows would have to mask the trash rows first.

Pairs cross to attention channels-major: a packed [P, C] tensor, transposed to [C, P] (which a
linear layer can produce directly), scatters row by row into [C, B, M, M], so each head's
attention map is one contiguous [B, M, M] block and no strided scatter or permuted copy of an
N² tensor is needed.

Padding rows of an unpacked tensor are zero, which is also what the models return for padding.
"""

from __future__ import annotations

import torch

from gtscale.loader.batch import Batch, fill_index, rounded_length


class Packing:
    """Flat indices of the real tokens and real (token, token) pairs of a dense [B, M] layout."""

    def __init__(self, num_graphs: int, size: int, tokens: torch.Tensor, pairs: torch.Tensor | None = None):
        """tokens: long [T], b·M + i of the real tokens (B·M = trash). pairs: long [P],
        (b·M + i)·M + j of the real pairs (B·M² = trash), or None when pairs stay dense."""
        self.num_graphs, self.size = num_graphs, size
        self.tokens, self.pairs = tokens, pairs
        # Reading uses a valid row in place of the trash one; what it reads is written to trash.
        self._read_tokens = tokens.clamp(max=num_graphs * size - 1)
        self._read_pairs = None if pairs is None else pairs.clamp(max=num_graphs * size * size - 1)

    @classmethod
    def for_batch(cls, batch: Batch, num_virtual: int = 0, pairs: bool = True) -> "Packing":
        """The packing of `batch` with `num_virtual` always-real tokens before each graph's nodes
        (layout [B, V+N]); from the batch's own indices, without looking at their values."""
        b, n = batch.node_mask.shape
        v, m = num_virtual, num_virtual + batch.node_mask.shape[1]
        tok = batch.token_index
        trash_tok = tok >= b * n
        graph, node = tok // n, tok % n
        tokens = torch.where(trash_tok, b * m, graph * m + v + node)
        pair_index = None
        if pairs:
            pair = batch.pair_index
            g, rest = pair // (n * n), pair % (n * n)
            pair_index = torch.where(pair >= b * n * n, b * m * m, (g * m + v + rest // n) * m + v + rest % n)
        if v:
            arange_b = torch.arange(b, device=tok.device)
            arange_v = torch.arange(v, device=tok.device)
            virtual = (arange_b[:, None] * m + arange_v).reshape(-1)  # [B·V]
            if pairs:
                first = graph * m  # [T] each real token's graph row offset
                real = (first + v + node)[:, None]
                row = torch.where(trash_tok[:, None], b * m * m, (first[:, None] + arange_v) * m + real - first[:, None])
                col = torch.where(trash_tok[:, None], b * m * m, real * m + arange_v)
                between = ((arange_b[:, None, None] * m + arange_v[:, None]) * m + arange_v).reshape(-1)  # [B·V·V]
                pair_index = torch.cat([between, row.reshape(-1), col.reshape(-1), pair_index])
                # B·V² + 2·T·V + P varies with the number of graphs: rounded as the loader rounds
                pair_index = fill_index(pair_index, min(rounded_length(pair_index.numel()), b * m * m), b * m * m)
            tokens = torch.cat([virtual, tokens])
            tokens = fill_index(tokens, min(rounded_length(tokens.numel()), b * m), b * m)
        return cls(b, m, tokens, pair_index)

    @property
    def num_tokens(self) -> int:
        """Packed token rows (trash rows included)."""
        return self.tokens.shape[0]

    def pack_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """[B, M, C] → [T, C]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self._read_tokens)

    def unpack_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """[T, C] → [B, M, C], zeros on padding."""
        rows = self.num_graphs * self.size
        dense = x.new_zeros(rows + 1, x.shape[-1])
        dense.index_copy_(0, self.tokens, x)  # in place: an out-of-place index_copy clones the zeros
        return dense[:rows].view(self.num_graphs, self.size, -1)

    def pack_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[B, M, M, C] → [P, C]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self._read_pairs)

    def unpack_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[P, C] → [B, M, M, C], zeros on padding pairs."""
        rows = self.num_graphs * self.size * self.size
        dense = x.new_zeros(rows + 1, x.shape[-1])
        dense.index_copy_(0, self.pairs, x)
        return dense[:rows].view(self.num_graphs, self.size, self.size, -1)

    def pairs_to_channels(self, x: torch.Tensor) -> torch.Tensor:
        """[C, P] → [C, B, M, M], zeros on padding pairs. Each channel is one contiguous block
        (the trash column sits past each channel's end, so channels are B·M²+1 apart)."""
        rows = self.num_graphs * self.size * self.size
        dense = x.new_zeros(x.shape[0], rows + 1)
        dense.index_copy_(1, self.pairs, x)
        return dense[:, :rows].view(-1, self.num_graphs, self.size, self.size)

    def channels_to_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """[C, B, M, M] → [C, P]: the inverse of `pairs_to_channels`."""
        return x.reshape(x.shape[0], -1).index_select(1, self._read_pairs)
