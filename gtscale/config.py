"""Typed configuration: dataclasses built from YAML dicts, with one-line errors naming the key.

Every configurable part of gtscale (a model, the loader, the trainer) is a dataclass whose fields
carry defaults and a comment saying what they mean. `from_dict` builds one from a (nested) dict and
rejects unknown keys and wrong types, naming the dotted key, before any work starts.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

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
    """Build dataclass `cls` from `data`; unknown keys and wrong types raise UserError naming the key."""
    if not isinstance(data, dict):
        raise UserError(f"{prefix.rstrip('.') or cls.__name__}: expected a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known))
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
