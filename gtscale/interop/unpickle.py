"""Loading checkpoints written by other programs without running their code.

`torch.load(weights_only=True)` is tried first; it reads plain state dicts (egt_pytorch's). fairseq
checkpoints also pickle argparse / omegaconf objects, which weights_only refuses. For those, torch.load
gets a restricted pickle module: its unpickler resolves only the functions that rebuild tensors and
an OrderedDict; every other global becomes an `Opaque` stand-in that records its name, arguments and
state as inert data. Nothing in the file can therefore call code of its choosing: calling an Opaque
class only stores its arguments.
"""

from __future__ import annotations

import collections
import pickle
import types
import warnings
from pathlib import Path

import torch

from gtscale.errors import UserError
from gtscale.io import describe_load_failure, safe_torch_load


class _Refused(Exception):
    """Raised from inside the restricted unpickler: the file asks for code where data must be."""


def _plain_arguments(rebuild):
    """`rebuild` refusing arguments that hold an Opaque stand-in: a tensor rebuilt from another
    global (a payload nested in _rebuild_tensor_v2) is a refusal, named in one line, not whatever
    torch says when given an object it did not expect (a TypeError of many lines)."""
    def guarded(*args):
        stack = list(args)
        while stack:
            arg = stack.pop()
            if isinstance(arg, Opaque) or (isinstance(arg, type) and issubclass(arg, Opaque)):
                raise _Refused(f"a tensor is rebuilt from {arg.qualname}")
            if isinstance(arg, (tuple, list)):
                stack.extend(arg)
            elif isinstance(arg, dict):
                stack.extend(arg.keys())
                stack.extend(arg.values())
        return rebuild(*args)
    return guarded


class Opaque:
    """Inert stand-in for a pickled object of a class we do not load: `qualname`, the arguments
    it was rebuilt with, and the state it would have been given (e.g. an argparse Namespace's
    attributes as a dict)."""

    qualname = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.state = args, None
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def __repr__(self) -> str:
        return f"<opaque {self.qualname}>"


def _opaque_class(module: str, name: str) -> type:
    return type(f"Opaque[{module}.{name}]", (Opaque,), {"qualname": f"{module}.{name}"})


#: Globals a tensor state dict needs; (module, name) → object. Storage classes are resolved by
#: torch's own wrapper before our find_class is asked.
_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _plain_arguments(torch._utils._rebuild_tensor_v2),
    ("torch._utils", "_rebuild_parameter"): _plain_arguments(torch._utils._rebuild_parameter),
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return _ALLOWED.get((module, name)) or _opaque_class(module, name)


def _restricted_pickle_module() -> types.ModuleType:
    module = types.ModuleType("gtscale_restricted_pickle")
    module.Unpickler = RestrictedUnpickler
    module.load = lambda f, **kwargs: RestrictedUnpickler(f, **kwargs).load()
    return module


def load_foreign_checkpoint(path: str | Path):
    """The checkpoint's contents with every tensor loaded and every other object inert."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint file")
    try:
        return safe_torch_load(path)
    except Exception:  # refused, empty, truncated, garbage: the restricted reader below gives the verdict
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_restricted_pickle_module())
    except _Refused as err:
        raise UserError(f"{path}: refused: loading it would run code ({err})") from err
    except Exception as err:  # a corrupt or foreign file (EOFError, IndexError, struct.error, …): an input problem
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({describe_load_failure(path, err)})") from err


def opaque_fields(obj) -> dict:
    """The attributes an Opaque stand-in was given (argparse.Namespace → its options), else {}.
    A live Namespace (a checkpoint built in memory rather than read from a file) gives its own."""
    if isinstance(obj, Opaque) and isinstance(obj.state, dict):
        return obj.state
    if (type(obj).__module__, type(obj).__qualname__) == ("argparse", "Namespace"):  # named, not imported: the library parses no arguments
        return vars(obj)
    return {}
