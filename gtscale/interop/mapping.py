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
