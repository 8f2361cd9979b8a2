"""Key bookkeeping shared by the importers: every source key is either converted or named as
knowingly dropped, and every converted key must be present; anything else is an error that lists
the keys."""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from gtscale.errors import UserError


class KeyMap:
    """Consumes a foreign state dict key by key; `finish` refuses leftovers."""

    def __init__(self, source: dict, where: str):
        bad = [k for k, v in source.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
        if bad:
            raise UserError(f"{where}: entries that are not named tensors: {', '.join(map(str, bad[:10]))}")
        self.source = dict(source)
        self.where = where
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.out: dict[str, torch.Tensor] = {}

    def has(self, key: str) -> bool:
        return key in self.source

    def get(self, key: str) -> torch.Tensor | None:
        """The source tensor (marked as used), or None after noting it as missing."""
        if key not in self.source:
            self.missing.append(key)
            return None
        self.used.add(key)
        return self.source[key].detach().float()

    def put(self, target: str, key: str | Iterable[str], convert: Callable = lambda t: t) -> None:
        """out[target] = convert(*sources) when every source key is present."""
        keys = [key] if isinstance(key, str) else list(key)
        tensors = [self.get(k) for k in keys]
        if all(t is not None for t in tensors):
            self.out[target] = convert(*tensors).contiguous()

    def drop(self, key: str) -> None:
        """A key the gtscale model has no use for (an unused module of the authors' code)."""
        if key in self.source:
            self.used.add(key)

    def finish(self) -> dict[str, torch.Tensor]:
        unknown = sorted(set(self.source) - self.used)
        if unknown or self.missing:
            parts = []
            if unknown:
                parts.append(f"unknown keys {', '.join(unknown)}")
            if self.missing:
                parts.append(f"missing keys {', '.join(self.missing)}")
            raise UserError(f"{self.where}: {'; '.join(parts)}")
        return self.out


def shape_of(source: dict, key: str, where: str) -> tuple[int, ...]:
    """A tensor's shape, or an error naming the key the importer needs to size the model."""
    value = source.get(key)
    if not isinstance(value, torch.Tensor):
        raise UserError(f"{where}: missing key {key} (needed to size the model)")
    return tuple(value.shape)


def invert(convert: Callable[[dict], dict], shapes: dict[str, tuple[int, ...]], ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The source state dict (keys and shapes `shapes`) that `convert` maps to `ours`: an
    importer run backwards, so that the one table of names and layouts in the importer also
    serves the other direction (gtscale weights into the authors' modules).

    Every importer only selects and moves elements (renames, permutations, concatenations, row
    shifts, reshapes), so tracing which source element lands where inverts it: `convert` runs
    twice on sources filled with their element numbers and their key numbers. A source element
    that no output reads (a table row no data reaches) comes back zero; an output element that
    no source feeds (zero-filled by the importer) has no place in the source and is left out."""
    names = list(shapes)
    sizes = [int(torch.Size(s).numel()) for s in shapes.values()]
    if max(sizes, default=0) >= 2**24:  # numbered through KeyMap's float32: exact below 2^24
        raise ValueError(f"invert: a tensor of {max(sizes)} elements is too large to trace")
    element = convert({k: torch.arange(1, n + 1, dtype=torch.float32).view(shapes[k]) for k, n in zip(names, sizes)})
    owner = convert({k: torch.full(shapes[k], float(i + 1)) for i, k in enumerate(names)})
    if set(element) != set(ours):
        raise ValueError(f"invert: the importer gives keys {sorted(set(element) ^ set(ours))} that the weights do not (or the reverse)")
    out = {k: torch.zeros(n) for k, n in zip(names, sizes)}
    filled = {k: torch.zeros(n, dtype=torch.bool) for k, n in zip(names, sizes)}
    for key, value in ours.items():
        value = value.detach().float().reshape(-1)
        index, source = element[key].reshape(-1).long() - 1, owner[key].reshape(-1).long() - 1
        for i in source.unique().tolist():
            if i < 0:
                continue  # zero-filled by the importer: no source element
            picked = source == i
            rows = index[picked]
            if filled[names[i]][rows].any() or rows.unique().numel() != rows.numel():
                raise ValueError(f"invert: {names[i]} feeds more than one output element; the importer is not invertible")
            out[names[i]][rows] = value[picked]
            filled[names[i]][rows] = True
    return {k: out[k].view(shapes[k]) for k in names}
