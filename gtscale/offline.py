"""gtscale reaches no network when it is imported or run: a cluster node may be air-gapped, and a
product must not phone home.

ogb, whose molecule features and evaluators gtscale uses, starts a thread when it is imported
(ogb/version.py) that asks the package index, through the `outdated` package, whether a newer ogb
exists. gtscale imports ogb first (gtscale/__init__.py), with `outdated` unimportable for that
moment: ogb then skips its check (it does so whenever `outdated` is missing) and every function of
ogb works as before. `outdated` is importable again afterwards, for whoever else wants it.
"""

from __future__ import annotations

import importlib.util
import sys


def import_ogb_offline() -> None:
    """Import ogb without its version check (module docstring); nothing when ogb is not installed
    or already imported."""
    if "ogb" in sys.modules or importlib.util.find_spec("ogb") is None:
        return
    before = sys.modules.get("outdated")
    sys.modules["outdated"] = None  # `from outdated import check_outdated` raises ImportError: ogb starts no thread
    try:
        import ogb  # noqa: F401
    finally:
        if before is None:
            sys.modules.pop("outdated", None)
        else:
            sys.modules["outdated"] = before
