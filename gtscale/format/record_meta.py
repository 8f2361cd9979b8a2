"""The records of a split as a table: each record's meta (idx, and for molecules its SMILES and
name) and graph targets y, read from the shards' meta.json and y.npy members without decoding any
graph. What a model that reads molecules rather than graphs (the ECFP and kernel baselines) needs
of a shard folder: the splits exactly as the shards hold them, record by record."""

from __future__ import annotations

import json

import numpy as np

from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.decode import decode_array
from gtscale.format.shardfile import ShardError, iter_samples, manifest_shards, read_shard


def split_meta(manifest: dict, split: str) -> tuple[list[dict], np.ndarray]:
    """(meta of each record, float32 [n, T] targets, NaN where unlabelled) of every record of
    `split`, sorted by idx; each shard checked against the manifest's size and sha256 first.
    T is the manifest's task.num_targets; a ShardError names a record that does not fit."""
    targets = int(manifest.get("task", {}).get("num_targets", 0))
    rows = []
    for entry in manifest_shards(manifest, split):
        for key, members in iter_samples(read_shard(entry, verify=True), entry.name, entry.schema_version):
            try:
                meta = json.loads(bytes(members["meta.json"]))
                idx = int(meta["idx"])
            except (KeyError, ValueError, TypeError) as err:
                raise ShardError(entry.name, key, f"no meta.json holding an integer 'idx' ({err})") from None
            if f"{schema.Y}.npy" in members:
                try:
                    y = decode_array(members[f"{schema.Y}.npy"], f"{schema.Y}.npy")
                except ValueError as err:
                    raise ShardError(entry.name, key, str(err)) from None
            else:
                y = np.full(targets, np.nan, np.float32)
            if y.shape != (targets,):
                raise ShardError(entry.name, key, f"y has shape {y.shape}; the manifest's task has {targets} target(s)")
            rows.append((idx, meta, y.astype(np.float32)))
    rows.sort(key=lambda row: row[0])
    return [meta for _, meta, _ in rows], np.stack([y for *_, y in rows]) if rows else np.zeros((0, targets), np.float32)


def record_smiles(folder, meta: dict) -> str:
    """A record's SMILES (its meta's), or a UserError naming the folder and record where the record
    keeps none (shards written before records kept them)."""
    smiles = meta.get(schema.META_SMILES)
    if not isinstance(smiles, str):
        raise UserError(f"{folder}: record {meta['idx']} keeps no SMILES (its shards were written before records kept them); "
                        "shard it again: the same `gtscale shard` command redoes its shards")
    return smiles


def split_smiles(folder, manifest: dict, split: str) -> tuple[np.ndarray, list[str]]:
    """(idx int64 [n], SMILES) of every record of `split`, sorted by idx (split_meta's order)."""
    metas, _ = split_meta(manifest, split)
    return np.array([meta["idx"] for meta in metas], np.int64), [record_smiles(folder, meta) for meta in metas]
