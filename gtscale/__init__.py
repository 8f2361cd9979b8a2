"""gtscale: distributed training of graph transformers on precomputed WebDataset shards."""

__version__ = "0.1.0"
