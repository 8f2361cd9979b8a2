"""Filler batches: what a rank that has run out of evaluation data feeds the model while the others
finish (see `gtscale.train.distributed_eval.lockstep`)."""

from __future__ import annotations

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.manifest import manifest_entry

from gtscale.loader.batch import FILLER_IDX


def filler_record(manifest: dict, keys: tuple[str, ...]) -> Record:
    """A one-node record with every key in `keys` (record keys), its dimensions read from the manifest."""
    for key in keys:
        produced = schema.PRODUCED.get(key)
        if produced is not None and produced.sized and manifest_entry(manifest, produced.entry) is None:
            raise UserError(f"{manifest.get('_dir', 'manifest')}: no {produced.entry}, so a filler batch cannot be shaped like the real ones")
    svd_rank, lap_k, targets = (int(manifest_entry(manifest, schema.PRODUCED[key].entry) or 0) for key in (schema.SVD_PE, schema.LAP_PE, schema.Y))
    features = manifest.get("features", {})
    if "node_float" in features:  # continuous node features (sampled subgraphs): no edge attributes
        node_features = {schema.NODE_FEAT_FLOAT: np.zeros((1, int(features["node_float"])), np.float16)}
    else:
        node_features = {
            schema.NODE_FEAT: np.zeros((1, len(features.get("node", schema.ATOM_FEATURE_DIMS))), np.uint8),
            schema.EDGE_FEAT: np.zeros((0, len(features.get("edge", schema.BOND_FEATURE_DIMS))), np.uint8),
        }
    arrays = {
        **node_features,
        schema.EDGE_INDEX: np.zeros((2, 0), np.int16),
        schema.SPD: np.zeros((1, 1), np.uint8),
        schema.PRED: np.full((1, 1), schema.pred_sentinel(np.dtype(np.uint8)), np.uint8),
        schema.IN_DEGREE: np.zeros(1, np.uint8),
        schema.OUT_DEGREE: np.zeros(1, np.uint8),
        schema.SVD_PE: np.zeros((1, 2 * svd_rank), np.float16),
        schema.LAP_PE: np.zeros((1, lap_k), np.float16),
        schema.LAP_EIGVAL: np.zeros(lap_k, np.float16),
        schema.Y: np.full(targets, np.nan, np.float32),
        schema.NODE_Y: np.full(1, np.nan, np.float32),
        schema.TARGET_POS: np.zeros(0, np.int16),  # no target: target_id FILLER_IDX, unlabelled
        schema.TARGET_Y: np.zeros(0, np.float32),
        schema.NODE_ID: np.full(1, FILLER_IDX, np.int64),
        schema.GRAPH_FEAT: np.zeros(int(features.get("graph", {}).get("dim", 0)), schema.GRAPH_FEAT_DTYPE),
    }
    required = (*node_features, schema.EDGE_INDEX, *keys)
    return Record("filler", "(filler)", 1, FILLER_IDX, {k: arrays[k] for k in required})

