import sys
from pathlib import Path

import pytest

from gtscale.cli import main

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tpsa_shards(tmp_path_factory) -> Path:
    """The bundled TPSA molecules in 2 train shards (of ~2000), as a user would shard them."""
    out = tmp_path_factory.mktemp("tpsa")
    assert main(["shard", "nci-tpsa", "--out", str(out), "--shard-size", "2000", "--no-progress", "--lap-k", "0"]) == 0
    return out
