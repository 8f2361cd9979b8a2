"""A gtscale model export made ready to run on molecules: its weights in its model, new molecules
featurised exactly as its shards were (the sharder's `writer.featurize_rows`, with the structure
options and graph features export.json records), batched by the loader's `collate`, and what the
model makes of them: its task predictions, or its pooled graph representation. A top-level module
like predict.py, which it serves, and beneath members/, whose kernel SVR reads that
representation: so neither imports the other's users.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from gtscale.config import from_dict
from gtscale.errors import UserError
from gtscale.format import schema
from gtscale.format.decode import Record
from gtscale.format.manifest import NODE_TASK
from gtscale.loader.batch import Batch
from gtscale.loader.bucketing import Batcher
from gtscale.loader.collate import collate, record_keys
from gtscale.prep.graph_features import GraphFeatures
from gtscale.prep.molecule_limits import DEFAULT_MAX_ATOMS
from gtscale.prep.structure import StructureOptions
from gtscale.prep.writer import ShardOptions, featurize_rows
from gtscale.train.config import TaskConfig


@dataclass
class LoadedExport:
    """A model export ready to run: the model (eval mode), and what it needs to read molecules."""

    path: Path
    model: torch.nn.Module
    task: TaskConfig
    target_names: list[str]
    options: ShardOptions  # how its shards' records were made; max_nodes always set
    keys: list[str]  # Batch fields the model reads
    path_dist: int  # path-edge distance it needs (Graphormer)

    def predict_batches(self, batches: Iterable[Batch]) -> tuple[np.ndarray, np.ndarray]:
        """(idx [n], outputs float32 [n, T]) of every sample of `batches` (shard loader batches, or
        `molecule_batches`), sorted by idx: the trainer's and evaluate's prediction loop
        (tasks.predict), then the task's outputs (probabilities for a binary task)."""
        from gtscale.train.tasks import GraphTask, predict

        task = GraphTask(self.task)
        idx, y_pred, _ = predict(task, self.model, batches, lambda batch: batch.to(device()))
        return idx, task.outputs(y_pred)

    def predict(self, molecules: Molecules, batch_size: int) -> tuple[np.ndarray, list[str]]:
        """(outputs float32 [n, T], NaN where a molecule was not read; reason per molecule, "" if none):
        the neural member of an ensemble (predict.Member)."""
        records, rows, reasons = molecules.made(("records", self.options), lambda: molecule_records(molecules.smiles, self.options))
        out = np.full((len(molecules.smiles), self.num_targets), np.nan, np.float32)
        if records:
            idx, values = self.predict_batches(molecule_batches(records, self.keys, self.path_dist, batch_size))
            out[idx] = values
        return out, list(reasons)

    @property
    def num_targets(self) -> int:
        return self.model.head.cfg.num_outputs


class Molecules:
    """A chunk of SMILES and what it has been turned into (records, fingerprints, representations),
    each made once for every ensemble member that reads molecules the same way."""

    def __init__(self, smiles: list[str]):
        self.smiles = smiles
        self._made: dict = {}

    def made(self, key, make: Callable):
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]


def check_record(meta: dict, folder: Path) -> None:
    """Refuse an export.json without the task and shards record that featurising molecules needs."""
    if "shards" not in meta or "task" not in meta:
        raise UserError(f"{folder / 'export.json'}: does not record the run's task and shards (exported before `gtscale predict` "
                        "existed, or imported): export the run again with `gtscale export`")


def load_model_export(folder: Path, model_cfg: dict, state: dict, meta: dict) -> LoadedExport:
    """A model export's weights in its model, with how its shards were made (export.json's record)."""
    from gtscale.models.export import MODEL_FILE, check_fits
    from gtscale.train.task_model import GraphTaskModel, loader_keys

    shards = meta["shards"]
    names = list(shards.get("task", {}).get("target_names", []))
    module = check_fits(state, model_cfg, str(folder / MODEL_FILE))
    if shards.get("task", {}).get("type") == NODE_TASK:
        raise UserError(f"{folder}: a node-task export; `gtscale predict` scores molecules (graph tasks)")
    transform = shards.get("transform", {})
    structure = StructureOptions(**{k: transform[k] for k in ("spd", "degree", "svd_rank", "lap_k", "paths") if k in transform})
    features = GraphFeatures.from_manifest(shards.get("features", {}).get("graph"), str(folder / "export.json"))
    keys, path_dist = loader_keys(module.backbone, model_cfg)
    keys = [k for k in keys if k != schema.Y]
    # The shards' --max-nodes, else the default cap: the work per molecule is bounded either way.
    max_nodes = DEFAULT_MAX_ATOMS if transform.get("max_nodes") is None else transform["max_nodes"]
    return LoadedExport(
        path=folder,
        model=GraphTaskModel(module.backbone, module.head).to(device()).eval(),  # the trainer's forward
        task=from_dict(TaskConfig, meta["task"], prefix=f"{folder / 'export.json'}: task."),
        target_names=names or [f"y{t}" for t in range(module.head.cfg.num_outputs)],
        options=ShardOptions(structure=read_structure(structure, record_keys(keys, path_dist)), max_nodes=max_nodes, graph_features=features),
        keys=keys,
        path_dist=path_dist,
    )


def read_structure(options: StructureOptions, keys: tuple[str, ...]) -> StructureOptions:
    """The shards' structure options less what no record key in `keys` (those the model reads) holds:
    a record needs no Laplacian encodings for EGT, no SVD for Graphormer. What is kept is made
    with the shards' options, as the shards made it."""
    spd = options.spd and (schema.SPD in keys or schema.PRED in keys)
    return StructureOptions(
        spd=spd,
        degree=options.degree and (schema.IN_DEGREE in keys or schema.OUT_DEGREE in keys),
        svd_rank=options.svd_rank if schema.SVD_PE in keys else 0,
        lap_k=options.lap_k if (schema.LAP_PE in keys or schema.LAP_EIGVAL in keys) else 0,
        paths=options.paths if spd and schema.PRED in keys else "bfs",  # fw_mid serves path edges alone
    )


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@torch.no_grad()
def graph_representation(export: LoadedExport, smiles: list[str], batch_size: int = 64) -> tuple[np.ndarray, list[str]]:
    """(float32 [n, d] pooled graph representation of each molecule: what the export's backbone
    hands its task head, NaN where a molecule was rejected; reason per molecule, "" if none),
    featurised as the export's shards were. The input of `gtscale baseline kernel`'s SVR and what
    `gtscale fingerprint` writes."""
    records, rows, reasons = molecule_records(smiles, export.options)
    out = np.full((len(smiles), export.model.backbone.graph_dim), np.nan, np.float32)
    for batch in molecule_batches(records, export.keys, export.path_dist, batch_size):
        out[batch.idx.numpy()] = batch_representation(export, batch)
    return out, reasons


@torch.no_grad()
def batch_representation(export: LoadedExport, batch: Batch) -> np.ndarray:
    """float32 [n, d]: the pooled graph representation of each graph of a collated batch."""
    return export.model.backbone(batch.to(device())).graph.float().cpu().numpy()


def shard_batches(export: LoadedExport, manifest: dict, split: str, batch_size: int) -> Iterable[Batch]:
    """The loader's batches of `batch_size` graphs of a shard folder's `split`, read as evaluation
    reads them (the export's keys, no bucketing, no shuffling)."""
    from gtscale.loader.config import LoaderConfig
    from gtscale.loader.stream import build_loader

    config = LoaderConfig(batching="graphs", batch_size=batch_size, bucketing=False, num_workers=0, keys=export.keys,
                          path_edges_max_dist=export.path_dist)
    return build_loader(manifest, split, config, train=False, rank=0, world_size=1)


#: Padded node pairs per molecule of a batch (B × N_max² ≤ batch_size × this): what attention and
#: edge tensors cost. Molecules of up to 64 atoms batch by count; a larger one shares a smaller
#: batch, or has one of its own, so that one large molecule does not make a whole batch pay for
#: its size (a batch of 64 padded to 512 atoms would hold 64 times one such molecule's tensors).
PAIRS_PER_MOLECULE = 64 * 64


#: Batches whose molecules are sorted by size together: a batch pads every molecule to its largest,
#: so molecules in input order pay for their neighbours' size, while sorted within a window of this
#: many batches they pad to molecules of like size. Every consumer places outputs by idx.
SORT_WINDOW = 64


def padded_batches(records: list[Record], batch_size: int) -> list[list[int]]:
    """Positions of `records` in batches: at most `batch_size` molecules and batch_size ×
    PAIRS_PER_MOLECULE padded node pairs each (the loader's Batcher), the molecules of each window
    of SORT_WINDOW batches taken in order of size (ties in input order)."""
    out = []
    window = batch_size * SORT_WINDOW
    order = [i for w in range(0, len(records), window)
             for i in sorted(range(w, min(w + window, len(records))), key=lambda i: records[i].num_nodes)]
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        largest = max(records[i].num_nodes for i in chunk)
        # The node budget never binds (a chunk holds batch_size molecules of at most `largest`); the pairs do.
        batcher = Batcher(node_budget=batch_size * largest, pair_budget=batch_size * PAIRS_PER_MOLECULE)
        out += batcher.batches((i, records[i].num_nodes) for i in chunk)
    return out


def molecule_records(smiles: list[str], options: ShardOptions) -> tuple[list[Record], list[int], list[str]]:
    """(records of the molecules the sharder would keep, each with its row as idx; their rows;
    reason per molecule, "" where kept)."""
    rows = np.arange(len(smiles), dtype=np.int64)
    graphs, _, rejects = featurize_rows(smiles, rows, np.zeros((len(smiles), 0), np.float32), None, options, with_keys=False)
    reasons = [""] * len(smiles)
    for row, reason in rejects:
        reasons[row] = reason
    kept = [g[schema.META]["idx"] for g in graphs]
    records = [Record(str(row), "<input>", len(g[schema.NODE_FEAT]), row, g) for row, g in zip(kept, graphs)]
    return records, kept, reasons


def molecule_batches(records: list[Record], keys: list[str], path_dist: int, batch_size: int) -> Iterator[Batch]:
    """The loader's collated batches of `records` (padded_batches': by size within a window; each
    batch's idx says whose outputs are whose)."""
    for members in padded_batches(records, batch_size):
        yield collate([records[i] for i in members], keys, path_dist)
