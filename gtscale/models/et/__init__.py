"""The Energy Transformer for graphs: one energy (energy.py), a dense form for graph
classification (dense.py, App. D) and a sparse edge-list form for node anomaly detection on large
graphs (sparse.py, App. C). `ET(cfg)` builds the form the config names."""

from __future__ import annotations

from torch import nn

from gtscale.models.config import ETConfig
from gtscale.models.et.dense import DenseET
from gtscale.models.et.sparse import SparseET, anomaly_loss

__all__ = ["DenseET", "ET", "SparseET", "anomaly_loss"]


def ET(cfg: ETConfig) -> nn.Module:
    """The dense or sparse model of cfg.form."""
    return DenseET(cfg) if cfg.form == "dense" else SparseET(cfg)
