"""gtscale: distributed training of graph transformers on precomputed WebDataset shards."""

from gtscale.offline import import_ogb_offline

__version__ = "0.1.0"

import_ogb_offline()  # before any module imports ogb: ogb's import-time version check would ask the package index
