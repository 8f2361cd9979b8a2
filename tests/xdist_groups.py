"""A pytest plugin (tests/conftest.py imports its hook): the tests of a module that share a
module-scoped fixture form one `--dist loadgroup` unit, named after the module.

Under `--dist loadgroup` pytest-xdist hands out every other test on its own, so a module's tests
land on both workers and each worker builds the module's fixture (a trained run, a shard folder)
once more. As one group they run on one worker, which builds it once.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    # At collection, before any pytest_collection_modifyitems: pytest-xdist reads the groups in
    # its own, and the order of that hook among plugins is not this file's to choose.
    info = getattr(item, "_fixtureinfo", None)
    if info is None or item.get_closest_marker("xdist_group"):
        return
    if any(fixture.scope == "module" for defs in info.name2fixturedefs.values() for fixture in defs):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))
