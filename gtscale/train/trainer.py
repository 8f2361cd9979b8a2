"""The training loop: DeepSpeed engine, streaming loaders, evaluation, checkpoints, preemption.

One `Trainer` per process (started by torchrun, deepspeed or srun). DeepSpeed owns the optimizer
state (ZeRO 0-3), precision, gradient accumulation and clipping; the loader owns data order; the
model knows nothing of either. Every collective here is reached by every rank: the per-micro-batch
all-reduce of [non-finite loss, stop requested, loss sum, micro-batches] is what lets all ranks
agree to skip a step or to checkpoint and exit.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.distributed as dist
import yaml

from gtscale.config import to_dict
from gtscale.loader.batch import Batch
from gtscale.train.distributed_eval import gather_predictions, lockstep
from gtscale.loader.stream import build_loader
from gtscale.errors import UserError
from gtscale.io import atomic_write_text
from gtscale.train import checkpoint
from gtscale.train.config import TrainConfig
from gtscale.train.engine_config import deepspeed_config, warmup_cosine
from gtscale.train.run_log import RunLog
from gtscale.train.task_model import build_task_model, load_backbone, loader_keys
from gtscale.train.tasks import evaluate, predictions, task_loss
from gtscale.train.throughput import StepResult, ThroughputWindow

#: Exit status after checkpointing on SIGTERM / SIGUSR1: "stopped for preemption, requeue me".
#: (75 is EX_TEMPFAIL of sysexits.h: a temporary failure, try again.) slurm/ scripts requeue on it.
EXIT_PREEMPTED = 75


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: str = "never"):
        import deepspeed

        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            deepspeed.init_distributed(dist_backend=backend)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        np.random.seed(cfg.seed + self.rank)

        from gtscale.format.manifest import load_manifest

        self.manifest = load_manifest(cfg.data.shards)
        num_targets = int(self.manifest["task"]["num_targets"])
        model, self.model_cfg = build_task_model(cfg, num_targets)
        if cfg.init_from is not None:
            load_backbone(model, cfg.init_from)
        keys, path_dist = loader_keys(model.backbone, self.model_cfg)
        loader_cfg = cfg.data.loader
        loader_cfg.keys, loader_cfg.path_edges_max_dist = keys, path_dist
        self.train_loader = build_loader(self.manifest, cfg.data.train_split, loader_cfg, train=True, rank=self.rank, world_size=self.world_size)
        self.eval_loader = build_loader(self.manifest, cfg.data.eval_split, loader_cfg, train=False, rank=self.rank, world_size=self.world_size)

        micro = loader_cfg.batch_size if loader_cfg.batching == "graphs" else 1
        floor = cfg.schedule.min_lr / cfg.optimizer.lr if cfg.optimizer.lr > 0 else 0.0
        schedule = lambda optimizer: torch.optim.lr_scheduler.LambdaLR(  # noqa: E731
            optimizer, lambda s: warmup_cosine(s, cfg.schedule.warmup_steps, cfg.schedule.total_steps, floor)
        )
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
            lr_scheduler=schedule, config=deepspeed_config(cfg, self.world_size, micro),
        )
        self.device = self.engine.device
        self.float_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.deepspeed.precision, torch.float32)

        self.step = 0
        self.best: dict = {}
        self.target_sum = torch.zeros(num_targets, dtype=torch.float64)
        self.target_count = torch.zeros(num_targets, dtype=torch.float64)
        self._stop_signal = False
        self._resume(resume)
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            resolved = to_dict(cfg) | {"model_resolved": self.model_cfg, "world_size": self.world_size}
            atomic_write_text(self.run_dir / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))
        dist.barrier()
        self.log = RunLog(self.run_dir, self.rank == 0, cfg.logging.tensorboard, cfg.logging.progress, cfg.schedule.total_steps, self.step)

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
        tag, state = checkpoint.restore(self.engine, self.ckpt_dir, tags if resume == "auto" else [resume], fallback=resume == "auto")
        if len(state["loader"]) != self.world_size:
            raise RuntimeError(f"{self.ckpt_dir / tag}: saved by {len(state['loader'])} ranks, resuming with {self.world_size}")
        self.step, self.best = state["step"], state["best"]
        self.target_sum, self.target_count = state["targets"][self.rank]
        self.train_loader.load_state_dict(state["loader"][self.rank])
        checkpoint.set_rng_state(state["rng"][self.rank])

    def save_checkpoint(self) -> str:
        client_state = {
            "step": self.step,
            "best": self.best,
            "targets": checkpoint.gather_to_all((self.target_sum, self.target_count)),
            "loader": checkpoint.gather_to_all(self.train_loader.state_dict()),
            "rng": checkpoint.gather_to_all(checkpoint.rng_state()),
        }
        protected = {self.best["tag"]} if "tag" in self.best else set()
        return checkpoint.save(self.engine, self.ckpt_dir, self.step, client_state, self.cfg.checkpoint.keep, protected)

    def _on_signal(self, signum, frame) -> None:
        self._stop_signal = True  # acted on at the next micro-batch boundary, by every rank together

    # --- data ----------------------------------------------------------------------------------
    def _train_batches(self) -> Iterator[Batch]:
        """Endless stream of this rank's batches. The loader advances its own epoch when one ends
        and, after load_state_dict, continues mid-epoch: it owns the position, the trainer does not."""
        while True:
            yield from self.train_loader

    def _to_device(self, batch: Batch) -> Batch:
        batch = batch.to(self.device, non_blocking=True)
        if self.float_dtype != torch.float32:
            for name in ("svd_pe", "lap_pe", "lap_eigval"):
                value = getattr(batch, name)
                if value is not None:
                    setattr(batch, name, value.to(self.float_dtype))
        return batch

    # --- one step ---------------------------------------------------------------------------------
    def train_step(self, batches: Iterator[Batch]) -> StepResult:
        """One optimizer step = gradient_accumulation_steps micro-batches that all ranks agree are finite."""
        self.engine.train()
        start = time.perf_counter()
        done = skipped = graphs = real_pairs = padded_pairs = 0
        loss_sum = 0.0
        stop = False
        while done < self.cfg.deepspeed.gradient_accumulation_steps:
            batch = self._to_device(next(batches))
            scores, aux_loss = self.engine(batch)
            loss = task_loss(scores, batch.y, batch.y_mask, self.cfg.task)
            if aux_loss is not None:
                loss = loss + aux_loss
            flags = torch.tensor([0.0 if torch.isfinite(loss) else 1.0, float(self._stop_signal), loss.item() if torch.isfinite(loss) else 0.0], dtype=torch.float64)
            dist.all_reduce(flags)  # sums: any non-finite, any stop request, total loss
            if flags[0] > 0:
                # No rank back-propagates this micro-batch, so no gradient holds any of it: it is
                # dropped everywhere and the step takes the next one instead.
                skipped += 1
                if skipped >= self.cfg.max_nonfinite:
                    raise FloatingPointError(f"{skipped} non-finite losses in a row at step {self.step}; stopping (lower optimizer.lr or check the data)")
                continue
            self.engine.backward(loss)
            self.engine.step()
            self._count_targets(batch)
            graphs += batch.num_graphs
            nodes = batch.node_mask.sum(dim=1)
            real_pairs += int((nodes * nodes).sum())
            padded_pairs += batch.num_graphs * batch.max_nodes**2
            loss_sum += float(flags[2]) / self.world_size
            done += 1
            stop = stop or bool(flags[1] > 0)
        self.step += 1
        return StepResult(loss_sum / done, graphs, real_pairs, padded_pairs, time.perf_counter() - start, skipped, stop)

    def _count_targets(self, batch: Batch) -> None:
        mask = batch.y_mask.cpu()
        self.target_sum += torch.where(mask, batch.y.cpu(), 0).double().sum(0)
        self.target_count += mask.double().sum(0)

    # --- evaluation -------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Metrics of the eval split, each sample predicted exactly once across ranks (OGB Evaluator)."""
        self.engine.eval()
        idx, rows = [], []
        filler = self.eval_loader.filler_batch()
        for batch in lockstep(self.eval_loader, filler, device=self.device if self.device.type == "cuda" else "cpu"):
            batch = self._to_device(batch)
            pred = predictions(self.engine(batch)[0], self.cfg.task)
            target = torch.where(batch.y_mask, batch.y.float(), torch.nan)
            idx.append(batch.idx)
            rows.append(torch.cat([pred, target], dim=1))
        expected = self.eval_loader.num_samples if self.cfg.data.loader.on_error == "raise" else None
        all_idx, all_rows = gather_predictions(idx, rows, expected=expected)
        t = all_rows.shape[1] // 2
        y_pred, y_true = all_rows[:, :t].numpy(), all_rows[:, t:].numpy()
        if self.rank == 0:
            self._save_predictions(all_idx.numpy(), y_pred, y_true)
        metrics = evaluate(y_pred, y_true, self.cfg.task)
        if self.cfg.task.loss != "bce":
            totals = self.target_sum.clone(), self.target_count.clone()
            dist.all_reduce(totals[0])
            dist.all_reduce(totals[1])
            mean = (totals[0] / totals[1].clamp(min=1)).numpy()
            labelled = ~np.isnan(y_true)
            metrics["mean_predictor_mae"] = float(np.abs(y_true - mean)[labelled].mean()) if labelled.any() else float("nan")
        metrics["samples"] = int(all_idx.numel())
        return metrics

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
        """Train to schedule.total_steps (or max_steps); returns the process exit status."""
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, self._on_signal)
        last_step = min(self.cfg.schedule.total_steps, self.cfg.max_steps or self.cfg.schedule.total_steps)
        batches = self._train_batches()
        window = ThroughputWindow()
        try:
            while self.step < last_step:
                result = self.train_step(batches)
                window.add(result)
                if self.step % self.cfg.logging.every == 0 or self.step == last_step:
                    self._log_train(result, window)
                    window = ThroughputWindow()
                self.log.progress(1, loss=result.loss, lr=self.scheduler.get_last_lr()[0],
                                  graphs_per_s=result.graphs * self.world_size / max(1e-9, result.seconds))
                self._evaluate_and_save(result, final=self.step == last_step)
                if result.stop:
                    self.log.message(f"step {self.step}: stop requested by signal; checkpoint saved, exiting with {EXIT_PREEMPTED} for requeue")
                    return EXIT_PREEMPTED
        finally:
            self.log.close()
        return 0

    def _log_train(self, result: StepResult, window: ThroughputWindow) -> None:
        if self.step == window.steps:  # the first window: optimizer state exists after the first step
            per_rank = checkpoint.gather_to_all(self.optimizer_state_bytes())
            self.log.metrics(self.step, "memory", {f"optimizer_state_bytes_rank{r}": b for r, b in enumerate(per_rank)})
        if window.skipped:
            self.log.message(f"step {self.step}: {window.skipped} micro-batch(es) with a non-finite loss dropped since the last line")
        values = {"loss": result.loss, "lr": self.scheduler.get_last_lr()[0], "epoch": self.train_loader.epoch, "nonfinite_skipped": window.skipped}
        self.log.metrics(self.step, "train", values | window.rates(self.world_size))

    def _evaluate_and_save(self, result: StepResult, final: bool) -> None:
        """Evaluate every eval.every steps, checkpoint every checkpoint.every steps, on a new best
        metric and when a stop was requested; both at the last step."""
        cfg = self.cfg
        save = final or result.stop or self.step % cfg.checkpoint.every == 0
        if final or (cfg.eval.every and self.step % cfg.eval.every == 0):
            metrics = self.evaluate()
            save = self._maybe_best(metrics) or save
            self.log.metrics(self.step, cfg.data.eval_split, metrics)
            self.log.message(f"step {self.step} {cfg.data.eval_split}: " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        if save:
            self.save_checkpoint()
            if self.rank == 0 and "tag" in self.best:
                atomic_write_text(self.run_dir / checkpoint.BEST_FILE, json.dumps(self.best))
