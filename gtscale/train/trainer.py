"""The training loop: DeepSpeed engine, streaming loaders, evaluation, checkpoints, preemption.

One `Trainer` per process (started by torchrun, deepspeed or srun). DeepSpeed owns the optimizer
state (ZeRO 0-3), precision, gradient accumulation and clipping; the loader owns data order; the
model knows nothing of either.

Collectives. Every rank reaches every collective, and every collective of this module moves tensors
that live on the engine's device (a CUDA device under NCCL, the CPU under gloo): the process group
has one backend. A mixed `cpu:gloo,cuda:nccl` group would also accept CPU tensors, but the per-step
tensors are born on the GPU (losses, non-finite flags), so gloo would cost a device→host copy and a
synchronisation for each, and a second backend brings its own rendezvous and failure modes; the
object collectives (all_gather_object) go through the current device under NCCL by design, which is
why `torch.cuda.set_device(LOCAL_RANK)` comes before the process group. Per optimizer step:
  1. one all-reduce of [labelled targets, scored distance pairs] of the step's micro-batches (all
     ranks): the denominators of the step's mean loss, known before any backward pass;
  2. one all-reduce of [non-finite losses, stop requested, next step's batches missing, loss] after
     the step's backward passes, read on the host (the step's one host synchronisation) to agree on
     skipping the update, on stopping, and on nothing else; the loss stays on the device until a
     metrics line is written.
Evaluation adds one one-element all-reduce per batch (`lockstep`), a gather of the predictions and
an all-reduce of the target sums; with eval.inference full (a graph store's every node scored on
rank 0), ZeRO-3's gather of the weights and one broadcast of rank 0's metrics instead, the other
ranks waiting in that broadcast for the time the inference takes. Checkpoints gather the loader
positions and RNG states.

Loss weighting. Every labelled target of an optimizer step weighs the same, whichever rank and
micro-batch it fell in (with node-budget batching, micro-batches hold very different graph counts):
micro-batch m contributes mean_m · n_m / N, N the step's labelled targets over all ranks and
micro-batches, so the step's gradient is that of the mean loss over the step's targets. DeepSpeed
divides the loss by gradient_accumulation_steps G in engine.backward and averages gradients over the
W ranks, so the trainer back-propagates W·G times that contribution. EGT's auxiliary distance loss
is weighted the same way over the scored node pairs (hop count ≤ ν) of the step: κ times the mean
cross-entropy over every scored pair the step saw.

Tasks. The trainer holds one `tasks.Task` and knows nothing else of the kind of task: which
targets of a batch are labelled, their loss, the prediction rows evaluation gathers and their
metrics are the task's. Graph tasks (tasks.GraphTask) label graphs; node tasks (node_task.NodeTask:
ego-subgraph shards, manifest task.type node_binary_classification, or a graph store sampled
online, data.graph, into ego subgraphs or EdgeBatches of node-induced subgraphs) label target nodes
and key their rows by global node id. Weighting, collectives and lockstep are the same for both.

Non-finite losses. A step whose loss is non-finite on any rank is skipped by every rank: its
gradients are set to zero (deepspeed.utils.safe_set_full_grad) and the optimizer steps with learning
rate 0, so no weight changes (Adam's moments decay by β once; the schedule advances). The step still
counts. `max_nonfinite` skipped steps in a row stop the run (exit 1). (The loop used to drop a
non-finite micro-batch before its backward pass, which needs an agreement per micro-batch.)

Stops. SIGTERM / SIGUSR1 (see stop_signals.py) are acted on at the end of a step: checkpoint at that
step, exit 75. The batches of step s+1 are fetched during step s, so a fetch that fails because the
DataLoader workers were killed by the same signal (scancel signals every process) is agreed on in
step s's all-reduce, and the checkpoint records the loader position before those batches. A stop on
a step that would evaluate checkpoints first and leaves the evaluation to the resumed job.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.distributed as dist

from gtscale.loader.batch import Batch
from gtscale.loader.edge_batch import EdgeBatch
from gtscale.loader.workers import start_fork_server
from gtscale.train.distributed_eval import EvaluationStopped, lockstep
from gtscale.errors import UserError
from gtscale.io import atomic_write_text
from gtscale.train import checkpoint, run_lock
from gtscale.train.compiled import compile_model, compile_stats
from gtscale.train.config import TrainConfig
from gtscale.train.data_source import split_loader, task_manifest
from gtscale.train.engine_config import check_with_deepspeed, deepspeed_config, lr_scheduler, param_groups
from gtscale.train.preflight import init_weights
from gtscale.train.run_log import RunLog
from gtscale.train.stop_signals import LOADER_FAILURES, StopSignals
from gtscale.train.resolve import record_configs, recorded_path, resolve_config
from gtscale.train.task_model import build_task_model, load_backbone
from gtscale.train.tasks import build_task, predict
from gtscale.train.eval_schedule import Patience, eval_interval
from gtscale.train.throughput import StepResult, ThroughputWindow, progress_rate, real_nodes

#: Exit status after checkpointing on SIGTERM / SIGUSR1: "stopped for preemption, requeue me".
#: (75 is EX_TEMPFAIL of sysexits.h: a temporary failure, try again.) slurm/ scripts requeue on it.
EXIT_PREEMPTED = 75


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: str = "never"):
        """Train `cfg` (the user's config, which is never written to: the run trains with its
        resolved copy, self.cfg, and records both in run_dir)."""
        self.run_dir = Path(cfg.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._lock: run_lock.RunLock | None = None
        if cfg.data.loader.num_workers and cfg.data.loader.start_method == "forkserver":
            start_fork_server()  # its imports overlap the process group's and the engine's set-up
        self._owns_group = join_process_group()
        try:
            self._build(cfg, resume)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: TrainConfig, resume: str) -> None:
        import deepspeed

        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self._lock = run_lock.acquire_on_rank0(self.run_dir)  # one run per run_dir, before anything is read or written
        self.manifest = task_manifest(cfg.data)  # shards' manifest, or the same keys for a graph store
        given, self.resolved = cfg, resolve_config(cfg, self.manifest)
        cfg = self.cfg = self.resolved.train  # target scaling, loader keys and pin_memory resolved
        num_targets = self.resolved.num_targets
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        np.random.seed(cfg.seed + self.rank)
        self.task = build_task(cfg, self.manifest)
        model = build_task_model(self.resolved, self.manifest)
        if cfg.init_from is not None:
            load_backbone(model, str(init_weights(cfg.init_from)))
        loader_cfg = cfg.data.loader
        self.train_loader = split_loader(cfg.data, self.manifest, cfg.data.train_split, loader_cfg, train=True, rank=self.rank, world_size=self.world_size)
        self.eval_loader = None  # eval.inference full scores the whole store instead of sampled batches
        if cfg.eval.inference == "sampled":
            self.eval_loader = split_loader(cfg.data, self.manifest, cfg.data.eval_split, loader_cfg, train=False, rank=self.rank, world_size=self.world_size)

        micro = loader_cfg.batch_size if loader_cfg.batching == "graphs" else 1
        # Head first, then the backbone by depth, each group with its own LR (finetune.*); a frozen
        # backbone is a zero LR for its groups, since ZeRO partitions ignore later requires_grad flips.
        groups = param_groups(model, cfg)
        if cfg.compile.enabled:
            compile_model(model, cfg.compile, loader_cfg.pad_to_bucket)
        ds_config = deepspeed_config(cfg, self.world_size, micro)
        check_with_deepspeed(ds_config)  # deepspeed.extra's values: one line, not an AssertionError inside initialize
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=groups, lr_scheduler=lr_scheduler(cfg, groups), config=ds_config,
        )
        self.device = self.engine.device
        self.float_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.deepspeed.precision, torch.float32)

        self.step = 0
        self.best: dict = {}
        self.eval_every = eval_interval(cfg.eval.every, self.train_loader.batches_per_epoch, cfg.deepspeed.gradient_accumulation_steps)
        self.patience = Patience(cfg.eval.patience)
        self.eval_pending = False  # a stop came on an evaluation step: the resumed job evaluates first
        self.target_sum = torch.zeros(num_targets, dtype=torch.float64)
        self.target_count = torch.zeros(num_targets, dtype=torch.float64)
        self.stops = StopSignals()
        self._ahead: list[Batch] = []  # the next step's micro-batches, fetched during this step …
        self._ahead_position: dict | None = None  # … and the loader position before them
        self._nonfinite_run = 0
        self._shapes: set[tuple[int, ...]] = set()
        self._resume(resume)
        if self.rank == 0:  # after _resume, which compares the model with the checkpoints' record
            self.run_dir.mkdir(parents=True, exist_ok=True)
            record_configs(self.run_dir, given, self.resolved, world_size=self.world_size, backend=dist.get_backend())
        dist.barrier()
        self.log = RunLog(self.run_dir, self.rank == 0, cfg.logging.tensorboard, cfg.logging.progress, self.last_step, self.step)
        if self.rank == 0:
            self.task.log_start(self.log, self.step)

    @property
    def last_step(self) -> int:
        """Where this run stops: schedule.total_steps, or max_steps when that comes first (the schedule
        keeps its length either way)."""
        return min(self.cfg.schedule.total_steps, self.cfg.max_steps or self.cfg.schedule.total_steps)

    def close(self) -> None:
        """Release the run_dir lock and end the process group this Trainer created (on success and on error)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False

    # --- resume / checkpoint ---------------------------------------------------------------
    def _resume(self, resume: str) -> None:
        tags = checkpoint.complete_tags(self.ckpt_dir)
        if resume == "never":
            if tags:
                raise UserError(f"{self.run_dir}: holds checkpoints ({tags[-1]}); pass --resume auto to continue it, or choose another run_dir")
            return
        if resume == "auto" and not tags:
            return  # a first start under a requeue-ready launcher: nothing to resume yet
        if resume != "auto" and resume not in tags:
            raise UserError(f"{self.ckpt_dir}: no complete checkpoint {resume!r} (have {', '.join(tags) or 'none'})")
        try:
            tag, state = checkpoint.restore(self.engine, self.ckpt_dir, tags if resume == "auto" else [resume], fallback=resume == "auto")
        except checkpoint.ModelMismatch as err:  # name what was edited since: the record is still the checkpoints' own
            recorded = recorded_path(self.run_dir)
            changed = checkpoint.model_changes(recorded, self.resolved.model, self.cfg.task.head)
            raise UserError(f"{err}; this config differs from {recorded} in {'; '.join(changed[:4]) or 'no recorded key'}") from None
        if len(state["loader"]) != self.world_size:
            raise RuntimeError(f"{self.ckpt_dir / tag}: saved by {len(state['loader'])} ranks, resuming with {self.world_size}")
        self.step, self.best = state["step"], state["best"]
        self.eval_pending = bool(state.get("eval_pending", False))
        self.patience.since_best = int(state.get("evals_since_best", 0))
        self.target_sum, self.target_count = state["targets"][self.rank]
        self.train_loader.load_state_dict(state["loader"][self.rank])
        checkpoint.set_rng_state(state["rng"][self.rank])

    def save_checkpoint(self) -> str:
        """Checkpoint at self.step; the loader position saved is that of the first batch not yet
        trained on (before any batches fetched ahead)."""
        client_state = {
            "step": self.step,
            "best": self.best,
            "eval_pending": self.eval_pending,
            "evals_since_best": self.patience.since_best,
            "targets": checkpoint.gather_to_all((self.target_sum, self.target_count)),
            "loader": checkpoint.gather_to_all(self.train_loader.state_dict(self._ahead_position)),
            "rng": checkpoint.gather_to_all(checkpoint.rng_state()),
        }
        protected = {self.best["tag"]} if "tag" in self.best else set()
        return checkpoint.save(self.engine, self.ckpt_dir, self.step, client_state, self.cfg.checkpoint.keep, protected)

    # --- data ----------------------------------------------------------------------------------
    def _train_batches(self) -> Iterator[Batch]:
        """Endless stream of this rank's batches. The loader advances its own epoch when one ends
        and, after load_state_dict, continues mid-epoch: it owns the position, the trainer does not."""
        while True:
            yield from self.train_loader

    def _fetch(self, batches: Iterator[Batch]) -> list[Batch] | None:
        """One step's micro-batches (host memory), or None when the loader's workers died under a stop
        request (scancel signals them too); any other failure is raised."""
        count = self.cfg.deepspeed.gradient_accumulation_steps
        try:
            micro = [next(batches) for _ in range(count)]
        except LOADER_FAILURES:  # DataLoader: "worker (pid N) exited unexpectedly" / "is killed by signal"
            self.stops.defer_worker_failures()
            if self.stops.wait():
                return None
            raise
        self.stops.defer_worker_failures()  # torch's SIGCHLD handler exists once a worker has started
        return micro

    def _to_device(self, batch: Batch | EdgeBatch) -> Batch | EdgeBatch:
        probe = batch.graph_index if isinstance(batch, EdgeBatch) else batch.node_mask
        if self.device.type == "cuda" and not probe.is_pinned():
            batch = batch.pin_memory()  # in-process loading (num_workers 0): DataLoader pins otherwise
        batch = batch.to(self.device, non_blocking=True)
        if self.float_dtype != torch.float32:
            for name in ("svd_pe", "lap_pe", "lap_eigval"):
                value = getattr(batch, name, None)
                if value is not None:
                    setattr(batch, name, value.to(self.float_dtype))
        return batch

    def _on_device(self, values: list[float]) -> torch.Tensor:
        """A float64 vector of host values on the engine's device, without a synchronising copy."""
        host = torch.tensor(values, dtype=torch.float64)
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)

    def _scored_pairs(self, batch: Batch) -> int:
        """Node pairs EGT's distance loss scores in `batch` (both nodes real, hops ≤ ν)."""
        aux = self.cfg.task.aux_distance
        if aux is None:
            return 0
        real = batch.node_mask[:, :, None] & batch.node_mask[:, None, :]
        return int((real & (batch.spd <= aux.max_hops)).sum())

    def _featured_graphs(self, batch: Batch) -> int:
        """Real graphs of `batch` whose graph_feat task.aux_graph_feat predicts (filler graphs have no node)."""
        if self.cfg.task.aux_graph_feat is None:
            return 0
        return int(batch.node_mask.any(dim=1).sum())

    # --- one step ---------------------------------------------------------------------------------
    def train_step(self, batches: Iterator[Batch], fetch_next: bool = False) -> StepResult:
        """One optimizer step over gradient_accumulation_steps micro-batches on every rank (see the
        module docstring for the weighting, the collectives and the non-finite rule).

        With `fetch_next`, the next step's micro-batches are fetched before this step's agreement,
        so that a loader that died under a stop request is known to every rank now."""
        self.engine.train()
        start = time.perf_counter()
        micro, self._ahead = self._ahead or self._fetch(batches), []
        self._ahead_position = None
        if micro is None:
            raise RuntimeError("the loader's workers died before the first step")  # only without fit's priming
        labelled = [self.task.labelled(b) for b in micro]
        pairs = [self._scored_pairs(b) for b in micro]
        featured = [self._featured_graphs(b) for b in micro]
        totals = self._on_device([sum(labelled), sum(pairs), sum(featured)])
        dist.all_reduce(totals)  # collective 1: the step's denominators over all ranks
        inverse = totals.clamp(min=1).reciprocal().float()
        backward_scale = float(self.world_size * len(micro))  # undoes DeepSpeed's ÷G and rank averaging
        step_loss = torch.zeros((), device=self.device)
        nonfinite = torch.zeros((), device=self.device)
        for i, cpu_batch in enumerate(micro):
            if self.cfg.compile.enabled:  # what a compiled model is specialised on (batch_shapes in metrics)
                self._shapes.add(tuple((cpu_batch.node_mask if isinstance(cpu_batch, Batch) else cpu_batch.graph_index).shape))
            batch = self._to_device(cpu_batch)
            scores, aux = self.engine(batch)
            loss = self.task.loss(batch, scores) * (labelled[i] * inverse[0])
            if "distance" in aux:
                loss = loss + aux["distance"] * (pairs[i] * inverse[1])
            if "graph_feat" in aux:
                loss = loss + aux["graph_feat"] * (featured[i] * inverse[2] * self.cfg.task.aux_graph_feat.weight)
            step_loss = step_loss + loss.detach()
            nonfinite = nonfinite + (~torch.isfinite(loss.detach())).float()
            self.engine.backward(loss * backward_scale)
            if i + 1 < len(micro):
                self.engine.step()  # not a boundary: DeepSpeed only counts the micro-step
        missing = False
        if fetch_next:
            self._ahead_position = self.train_loader.position()
            ahead = self._fetch(batches)
            missing, self._ahead = ahead is None, ahead or []
        flags = torch.cat([torch.stack([nonfinite.double(), step_loss.double()]), self._on_device([float(self.stops.requested), float(missing)])])
        dist.all_reduce(flags)  # collective 2: [non-finite, loss, stop, next batches missing]
        any_nonfinite, stop, any_missing = (v > 0 for v in flags[[0, 2, 3]].tolist())  # the step's one host sync
        if any_nonfinite:
            self._skip_update()
        self.engine.step()  # the boundary: the optimizer step (a zero one when skipped)
        self.step += 1
        self._nonfinite_run = self._nonfinite_run + 1 if any_nonfinite else 0
        if self._nonfinite_run >= self.cfg.max_nonfinite:
            raise FloatingPointError(f"{self._nonfinite_run} non-finite losses in a row (their steps skipped) at step {self.step}; stopping (lower optimizer.lr or check the data)")
        if not any_nonfinite:
            for batch in micro:
                self._count_targets(batch)
        graphs, nodes = sum(b.num_graphs for b in micro), sum(real_nodes(b) for b in micro)
        real_pairs, padded_pairs = (sum(sizes) for sizes in zip(*(_attention_pairs(b) for b in micro)))
        return StepResult(flags[1], graphs, nodes, real_pairs, padded_pairs, time.perf_counter() - start, int(any_nonfinite), stop or any_missing)

    def _skip_update(self) -> None:
        """Make the coming optimizer step change no weight: zero gradients (NaN-free, so Adam's
        moments stay finite) and learning rate 0 for this step; the scheduler sets the next one."""
        from deepspeed.utils import safe_set_full_grad

        for param in self.engine.module.parameters():
            if param.requires_grad:
                safe_set_full_grad(param, torch.zeros(param.ds_shape if hasattr(param, "ds_shape") else param.shape, dtype=torch.float32, device=self.device))
        for group in self.engine.optimizer.param_groups:
            group["lr"] = 0.0

    def _count_targets(self, batch: Batch) -> None:
        """Running target sums for the mean predictor of regression tasks (node tasks have none)."""
        totals = self.task.target_totals(batch)
        if totals is not None:
            self.target_sum += totals[0]
            self.target_count += totals[1]

    # --- evaluation -------------------------------------------------------------------------------
    def _stop_after_loader_failure(self) -> bool:
        self.stops.defer_worker_failures()
        return self.stops.wait()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float] | None:
        """Metrics of the eval split, each sample predicted exactly once across ranks (tasks.predict:
        graph tasks by source idx, node tasks by global node id); None when a stop request killed a
        rank's loader workers (every rank returns None)."""
        self.engine.eval()
        if self.cfg.eval.inference == "full":
            return self._evaluate_full()
        batches = lockstep(self.eval_loader, self.eval_loader.filler_batch(), device=self.device, stop_on_failure=self._stop_after_loader_failure)
        expected = self.eval_loader.num_samples if self.cfg.data.loader.on_error == "raise" else None
        try:
            idx, y_pred, y_true = predict(self.task, self.engine, batches, self._to_device, expected=expected)
        except EvaluationStopped:
            return None
        if self.rank == 0:
            self._save_predictions(idx, y_pred, y_true)
        metrics = self.task.metrics(y_pred, y_true)
        if self.cfg.task.loss in ("l1", "mse"):  # regression: how far a constant (the train mean) gets
            totals = torch.stack([self.target_sum, self.target_count]).to(self.device)
            dist.all_reduce(totals)  # on the engine's device: NCCL reduces no CPU tensor
            mean = (totals[0] / totals[1].clamp(min=1)).cpu().numpy()
            labelled = ~np.isnan(y_true)
            metrics["mean_predictor_mae"] = float(np.abs(y_true - mean)[labelled].mean()) if labelled.any() else float("nan")
        metrics["samples"] = int(len(idx))
        return metrics

    def _evaluate_full(self) -> dict[str, float]:
        """Metrics of the eval split scored by full-neighbourhood inference (every node of the store
        with all of its neighbours: train/full_inference.py), computed on rank 0 from an fp32 copy
        of the weights, which ZeRO-3 first gathers on every rank; the metrics are broadcast, so that
        every rank takes the same best checkpoint and patience decisions as after a sampled one."""
        import deepspeed

        module = self.engine.module
        result: list[dict | None] = [None]
        with deepspeed.zero.GatheredParameters(list(module.parameters()), enabled=self.cfg.deepspeed.zero_stage == 3):
            if self.rank == 0:
                state = {name: t.detach().float().clone() for name, t in [*module.named_parameters(), *module.named_buffers()]}
                with torch.device("meta"):  # shapes only: the weights come from `state`, and no RNG is drawn
                    model = build_task_model(self.resolved, self.manifest)
                model.load_state_dict(state, assign=True)
                result = [self._full_metrics(model)]
        dist.broadcast_object_list(result, src=0)
        return result[0]

    def _full_metrics(self, model: torch.nn.Module) -> dict[str, float]:
        from gtscale.graphs.store import GraphStore
        from gtscale.train.data_source import split_nodes
        from gtscale.train.full_inference import full_graph_logits, split_rows

        graph, start = self.cfg.data.graph, time.perf_counter()
        store = GraphStore.open(graph.store)
        logits = full_graph_logits(model, store, self.run_dir / "eval", progress=False)
        idx, y_pred, y_true = split_rows(logits, store, split_nodes(graph)[self.cfg.data.eval_split])
        self._save_predictions(idx, y_pred, y_true)
        self.log.message(f"step {self.step}: full-neighbourhood inference over {store.num_nodes:,} nodes in {time.perf_counter() - start:.0f} s")
        return self.task.metrics(y_pred, y_true) | {"samples": int(len(idx))}

    def _save_predictions(self, idx: np.ndarray, y_pred: np.ndarray, y_true: np.ndarray) -> None:
        """predictions/<split>-step<N>.npz: what the metrics were computed from, by source idx."""
        folder = self.run_dir / "predictions"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.cfg.data.eval_split}-step{self.step:08d}.npz"
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, idx=idx, y_pred=y_pred, y_true=y_true)
        tmp.replace(path)

    def optimizer_state_bytes(self) -> int:
        """Bytes of optimizer state (Adam moments, and ZeRO's fp32 partitions) held by this rank."""
        optimizer = self.engine.optimizer
        while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
            optimizer = optimizer.optimizer  # ZeRO wrappers hold the torch optimizer of their partition
        tensors = [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t) and t.dim() > 0]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _maybe_best(self, metrics: dict[str, float]) -> bool:
        name = self.cfg.task.metric
        if name not in metrics:
            return False
        value = metrics[name]
        better = "value" not in self.best or (value > self.best["value"] if self.cfg.task.higher_is_better else value < self.best["value"])
        if better:
            self.best = {"metric": name, "value": value, "step": self.step, "tag": checkpoint.tag_of(self.step)}
        return better

    # --- the run ------------------------------------------------------------------------------------
    def fit(self) -> int:
        """Train to schedule.total_steps (or max_steps); returns the process exit status. Ends the
        process group (when this Trainer made it), also on error."""
        self.stops.install()
        last_step = self.last_step
        batches = self._train_batches()
        window = ThroughputWindow()
        try:
            if self.eval_pending and self._evaluate_and_save(stop=False, final=self.step >= last_step, evaluate_now=True):
                return self._stopped(save=False)  # the previous job stopped on an evaluation step, and this one too
            if self.patience.exhausted:  # stopped early (also: in the job this one resumes)
                return 0
            if self.step < last_step and not self._prime(batches):
                return self._stopped(save=self.step > 0 and checkpoint.tag_of(self.step) not in checkpoint.complete_tags(self.ckpt_dir))
            while self.step < last_step and not self.patience.exhausted:
                result = self.train_step(batches, fetch_next=self.step + 1 < last_step)
                window.add(result)
                if self.step % self.cfg.logging.every == 0 or self.step == last_step or result.stop:
                    self._log_train(result, window)
                    window = ThroughputWindow()
                self.log.progress(1)
                if self._evaluate_and_save(stop=result.stop, final=self.step == last_step):
                    return self._stopped(save=False)
        finally:
            self.log.close()
            self.close()
        return 0

    def _prime(self, batches: Iterator[Batch]) -> bool:
        """Fetch the first step's micro-batches and agree that every rank has them and no stop was
        requested (one all-reduce, once per job); False: stop before training."""
        self._ahead_position = self.train_loader.position()
        ahead = self._fetch(batches)
        self._ahead = ahead or []
        flags = self._on_device([float(ahead is None), float(self.stops.requested)])
        dist.all_reduce(flags)
        return not bool((flags > 0).any())

    def _stopped(self, save: bool) -> int:
        if save:
            self.save_checkpoint()
        self.log.message(f"step {self.step}: stop requested by signal; checkpoint at this step, exiting with {EXIT_PREEMPTED} for requeue")
        return EXIT_PREEMPTED

    def _log_train(self, result: StepResult, window: ThroughputWindow) -> None:
        if self.step == window.steps:  # the first window: optimizer state exists after the first step
            per_rank = checkpoint.gather_to_all(self.optimizer_state_bytes())
            self.log.metrics(self.step, "memory", {f"optimizer_state_bytes_rank{r}": b for r, b in enumerate(per_rank)})
        if window.skipped:
            self.log.message(f"step {self.step}: {window.skipped} step(s) with a non-finite loss skipped since the last line")
        loss, lr = float(result.loss), self.scheduler.get_last_lr()[0]  # the loss leaves the device here
        values = {"loss": loss, "lr": lr, "epoch": self.train_loader.epoch, "nonfinite_skipped": window.skipped} | window.rates(self.world_size)
        if self.cfg.compile.enabled:
            values |= compile_stats() | {"batch_shapes": self.batch_shapes}
        self.log.metrics(self.step, "train", values)
        self.log.progress(0, loss=loss, lr=lr, **progress_rate(values, self.task.speed_in_nodes))

    @property
    def batch_shapes(self) -> int:
        """Batch shapes trained on so far with a compiled model (each compiled once; 0 in eager)."""
        return len(self._shapes)

    def _evaluate_and_save(self, stop: bool, final: bool, evaluate_now: bool = False) -> bool:
        """Evaluate every eval.every steps, checkpoint every checkpoint.every steps, on a new best
        metric, when a stop was requested and when eval.patience runs out; both at the last step. A
        stop on an evaluation step (also one that ends an evaluation midway) checkpoints and leaves
        the evaluation to the resumed job (eval_pending). Returns whether to stop (for requeue)."""
        cfg = self.cfg
        save = final or stop or (not evaluate_now and self.step % cfg.checkpoint.every == 0)  # evaluate_now: saved already
        due = evaluate_now or final or (self.eval_every and self.step % self.eval_every == 0)
        if due and not stop:
            metrics = self.evaluate()
            stop = metrics is None
        if due and stop:
            self.eval_pending, save = True, True
        elif due:
            self.eval_pending = False
            improved = self._maybe_best(metrics)
            self.patience.update(improved, counts=self.step > max(cfg.schedule.warmup_steps, cfg.eval.min_steps))
            save = improved or save or self.patience.exhausted
            self.log.metrics(self.step, cfg.data.eval_split, metrics)
            self.log.message(f"step {self.step} {cfg.data.eval_split}: " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
            if self.patience.exhausted:
                self.log.message(f"step {self.step}: no better {cfg.task.metric} in {self.patience.limit} evaluations "
                                 f"(best {self.best.get('value', float('nan')):.4f} at step {self.best.get('step')}); stopping early")
        if save:
            self.save_checkpoint()
            if self.rank == 0 and "tag" in self.best:
                atomic_write_text(self.run_dir / checkpoint.BEST_FILE, json.dumps(self.best))
        return stop


def _attention_pairs(batch: Batch | EdgeBatch) -> tuple[int, int]:
    """(pairs that matter, pairs computed) of a batch's attention: Σ n² and B·N² for a padded Batch,
    the edge count twice for an EdgeBatch (attention along edges: no padding)."""
    if isinstance(batch, EdgeBatch):
        return batch.num_edges, batch.num_edges
    return int((batch.node_mask.sum(dim=1) ** 2).sum()), batch.num_graphs * batch.max_graph_nodes**2


#: What torch's env:// rendezvous reads (torchrun sets them; launch_env derives them under srun).
RENDEZVOUS_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def join_process_group() -> bool:
    """Join the job's process group (True when this call created it). The CUDA device comes first:
    NCCL binds a communicator to the current device when the group's first collective runs.

    Under CUDA the NCCL group is created here with `device_id`, which binds its communicator to
    this rank's GPU at once; without it NCCL guesses the device from the global rank ("Guessing
    device ID based on global rank. This can cause a hang if rank to GPU mapping is heterogeneous",
    printed by launch/gpu-check on an H200). DeepSpeed then adopts the existing group. Without the
    rendezvous variables (no launcher), DeepSpeed's own discovery (MPI, AzureML) creates it."""
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    if dist.is_initialized():
        return False
    import deepspeed
    from deepspeed.constants import default_pg_timeout

    device = {"device_id": torch.device("cuda", local_rank)} if cuda else {}
    if os.environ.get("WORLD_SIZE") == "1":
        # One process needs no rendezvous: an in-memory store, so no port is bound (a free port
        # picked, released and bound later can be taken by another process in between).
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=default_pg_timeout, **device)
    elif cuda and all(key in os.environ for key in RENDEZVOUS_ENV):
        dist.init_process_group("nccl", timeout=default_pg_timeout, **device)
    if not cuda:
        _skip_shared_memory_allreduce_build()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", timeout=default_pg_timeout)
    return True


def _skip_shared_memory_allreduce_build() -> None:
    """DeepSpeed's CPU backend JIT-compiles a C++ shared-memory all-reduce (deepspeed_shm_comm) when
    its process group starts. Only DeepSpeed's inference all-reduce uses it; training never does. The
    compile takes 40 s to 3 min on 2 cores, with every other rank waiting on its lock, and is redone
    whenever the extension cache was last built by another ninja or virtual environment. Marking the
    op incompatible (DeepSpeed keeps the probe's result in one module dict for such edits) makes the
    backend fall back to plain torch.distributed, which is what training uses anyway."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
