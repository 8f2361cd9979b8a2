"""Typed configuration: dataclasses built from YAML dicts, with one-line errors naming the key.

Every configurable part of gtscale (a model, the loader, the trainer) is a dataclass whose fields
carry defaults and a comment saying what they mean. `from_dict` builds one from a (nested) dict and
rejects unknown keys, wrong types and values outside a field's `Range` (declared on the field with
`ranged`), naming the dotted key, before any work starts.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml

from gtscale.errors import UserError

T = TypeVar("T")

#: The YAML presets shipped inside the package (models/, tasks/, deepspeed/), so that an installed
#: gtscale resolves `model: egt-small` or `deepspeed: zero2` wherever it runs. The repository's
#: top-level `configs` is a link to this folder.
CONFIG_ROOT = Path(__file__).resolve().parent / "configs"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `1e-5` as a float as YAML 1.2 does (YAML 1.1, which PyYAML
    follows, wants `1.0e-5` and would read `lr: 1e-5` as the string "1e-5")."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str):
    """YAML text → Python values (safe: plain data only), with YAML 1.2's exponent floats."""
    return yaml.load(text, Loader=_Loader)


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: config file not found")
    try:
        data = parse_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of keys to values")
    return data


@dataclass(frozen=True)
class Range:
    """The values a field may take: a number finite and within low..high (either end open, or
    absent); a list's numbers each so, and the list between min_items and max_items long.
    Declared once on the field (`ranged`) and checked by `from_dict` whenever a config is read, so a
    training YAML and an export's model.yaml meet the same bounds. Upper bounds keep the work of
    building a model from a file bounded. `note` says what a special value means ("0 = off"); the
    error message carries it. A constraint that involves another field is no Range: it is checked
    where both are known (train/preflight.py for a training config)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False  # low itself is excluded
    high_open: bool = False
    min_items: int = 0  # a list field: its fewest values
    max_items: Optional[int] = None  # a list field: its most values
    note: str = ""

    def holds(self, value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            if len(value) < self.min_items or (self.max_items is not None and len(value) > self.max_items):
                return False
        for number in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                continue  # not a number (a Literal's "auto", a null): the type check has decided
            if not math.isfinite(number):
                return False
            if self.low is not None and (number < self.low or (self.low_open and number == self.low)):
                return False
            if self.high is not None and (number > self.high or (self.high_open and number == self.high)):
                return False
        return True

    def __str__(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            if not (self.low_open or self.high_open) and float(self.low).is_integer() and float(self.high).is_integer():
                return f"in {low}..{high}"
            return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {high}"
        return "finite"

    def describe(self, value: Any) -> str:
        """What the field must be, worded for `value` (a number, or a list of them)."""
        bound = f"{self}{f' ({self.note})' if self.note else ''}"
        if not isinstance(value, (list, tuple)):
            return bound
        if self.min_items == 0 and self.max_items is None:
            return f"{bound} (each value)"
        if self.min_items == self.max_items:
            count = str(self.min_items)
        elif self.max_items is None:
            count = f"{self.min_items} or more"
        else:
            count = f"{self.min_items} to {self.max_items}"
        return f"{count} values, each {bound}"


def _number(value: Optional[float]) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def ranged(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, low: Optional[float] = None,
           high: Optional[float] = None, low_open: bool = False, high_open: bool = False, min_items: int = 0,
           max_items: Optional[int] = None, note: str = "") -> Any:
    """A dataclass field whose value (or each number of its list) must lie in a Range."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"range": Range(low, high, low_open, high_open, min_items, max_items, note)})


def check_range(cls: type, name: str, value: Any, key: str) -> None:
    """UserError naming `key` unless `value` lies in the Range field `name` of `cls` declares."""
    allowed = {f.name: f for f in dataclasses.fields(cls)}[name].metadata.get("range")
    if allowed is not None and value is not None and not allowed.holds(value):
        raise UserError(f"{key}: must be {allowed.describe(value)}, got {value!r}")


def check_field_ranges(obj: Any, prefix: str = "") -> None:
    """Every Range of a dataclass instance's fields holds, those of its nested dataclasses too
    (what `from_dict` checks before building one; a __post_init__ calls this so that one built in
    code, or copied with dataclasses.replace, meets the same bounds). Errors name `prefix` + key."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        check_range(type(obj), f.name, value, f"{prefix}{f.name}")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_field_ranges(value, f"{prefix}{f.name}.")


def _check_value(value: Any, annotation: Any, key: str) -> Any:
    """Return `value` converted to `annotation` where that is lossless, else raise UserError."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_value(value, option, key)
            except UserError as err:
                errors.append(str(err))
        raise UserError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise UserError(f"{key}: {value!r} is not one of {', '.join(map(repr, choices))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        args = typing.get_args(annotation)
        item_type = args[0] if args else Any
        items = [_check_value(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a mapping, got {type(value).__name__}")
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return from_dict(annotation, value, prefix=f"{key}.")
    if annotation is bool:
        if not isinstance(value, bool):
            raise UserError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise UserError(f"{key}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Build dataclass `cls` from `data`; unknown keys, wrong types and values out of range raise
    UserError naming the key. A class with `OPEN = True` types the keys it declares and leaves
    the others as they are (to the readers of a record that other modules extend)."""
    if not isinstance(data, dict):
        raise UserError(f"{prefix.rstrip('.') or cls.__name__}: expected a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known))
    if getattr(cls, "OPEN", False):  # a record typing only the keys its readers interpret (models/export.py)
        data, unknown = {k: v for k, v in data.items() if k in known}, []
    if unknown:
        raise UserError(
            f"{prefix}{unknown[0]}: unknown key (known: {', '.join(sorted(known))})"
        )
    kwargs = {name: _check_value(value, hints[name], f"{prefix}{name}") for name, value in data.items()}
    missing = [
        name for name, f in known.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise UserError(f"{prefix}{missing[0]}: required key is missing")
    for name, value in kwargs.items():  # before __post_init__, whose cross-field checks assume sane values
        check_range(cls, name, value, f"{prefix}{name}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:  # __post_init__ validation
        raise UserError(f"{prefix.rstrip('.') or cls.__name__}: {err}") from err


def to_dict(obj: Any) -> Any:
    """Dataclass → plain dict (for saving the resolved config)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``dotted.key=value`` overrides (values parsed as YAML) to a nested dict, in place."""
    for item in overrides:
        if "=" not in item:
            raise UserError(f"{item}: override must look like dotted.key=value")
        dotted, raw = item.split("=", 1)
        value = parse_yaml(raw) if raw != "" else ""
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"{dotted}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return data
