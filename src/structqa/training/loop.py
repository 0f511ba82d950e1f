"""The training loop: one explicit function, read top to bottom (HF Accelerate underneath).

Runs on one CPU, one GPU, or many processes under ``accelerate launch``. Each process takes
every world_size-th batch of the same seeded, length-grouped batch order. Checkpoints:
``last`` (resumable: optimizer, scheduler, RNG and position inside the epoch) and ``best``
(by validation F1 at epoch ends; the test file is scored once afterwards). SIGINT/SIGTERM
stop cleanly after the current step, saving ``last`` so that ``--resume`` continues exactly
where training stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import gather_object, set_seed

from structqa.config import Config, validate
from structqa.decoding import DecodeConfig
from structqa.evaluation import EvalResult, score_collector, write_outputs
from structqa.features.batching import collate, length_grouped_batches
from structqa.features.squad import Feature
from structqa.inference import run_inference
from structqa.io import append_jsonl, write_json
from structqa.models.build import build_model
from structqa.runtime import autocast, use_bf16
from structqa.training.checkpoint import (
    resume_from,
    safetensors_loader,
    save_checkpoint,
    start_log,
)
from structqa.training.data import TrainData, prepare_data
from structqa.training.heldout import score_best_once
from structqa.training.optim import build_optimizer, linear_warmup_decay

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGINT/SIGTERM; loops check it after each step and save before stopping.

    ``StopFlag.received`` keeps the last signal any loop caught, also when it came during
    the run's last step or its final evaluation and the run still finished: a caller that
    runs several trainings in turn (the experiment runner) reads it to stop after this one."""

    received: int | None = None

    def __init__(self) -> None:
        self.stop = False

    def __call__(self, signum, frame) -> None:  # noqa: ARG002
        log.warning("signal %s: saving and stopping after this step", signum)
        self.stop = True
        StopFlag.received = signum

    def synced(self, device: torch.device) -> bool:
        """The flag agreed by every process: one signalled process stops them all after the
        same step. (A signal may reach one rank only; a rank that stopped alone would leave
        the others waiting in their next gradient all-reduce.) One tiny all-reduce per step
        under torch.distributed; no communication in a single process."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([int(self.stop)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.stop = bool(flag.item())
        return self.stop


def epoch_batches(features: list[Feature], cfg: Config, epoch: int, world: int) -> list[list[int]]:
    """The batch order of one epoch: a function of (seed, epoch) only, so resume can rebuild it."""
    batches = length_grouped_batches(
        [len(f) for f in features], cfg.train.batch_size, seed=cfg.train.seed * 100_003 + epoch
    )
    usable = len(batches) - len(batches) % world  # every process gets the same number
    return batches[:usable]


def start_accelerator(bf16_setting: str) -> tuple[Accelerator, bool]:
    """The Accelerator every loop uses, and whether bf16 autocast is on for its device.

    Autocast is ours (the same code on CPU and GPU); cpu=True lets Accelerate start gloo
    processes on a machine without CUDA; CPU runs are made deterministic."""
    accelerator = Accelerator(mixed_precision="no", cpu=not torch.cuda.is_available())
    device = accelerator.device
    bf16 = use_bf16(bf16_setting, device)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    log.info("device %s, %d process(es), bf16 %s", device, accelerator.num_processes, bf16)
    return accelerator, bf16


def run(cfg: Config, resume: bool = False, progress: bool = True) -> EvalResult | None:
    """Check the config, seed, build the model, read and featurize the data, train; then
    score best/ once on the test file (data.eval) when best/ was chosen on validation data
    (that result is returned; else best/'s on the data that chose it)."""
    validate(cfg)
    set_seed(cfg.train.seed)
    model, tokenizer = build_model(cfg)
    data = prepare_data(cfg, tokenizer)
    best = train(cfg, model, tokenizer, data, resume=resume, progress=progress)
    return score_best_once(cfg, best)


def train(
    cfg: Config, model, tokenizer, data: TrainData, resume: bool = False, progress: bool = True
) -> EvalResult | None:
    tc = cfg.train
    out = Path(tc.output_dir)
    accelerator, bf16 = start_accelerator(tc.bf16)
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    batches_per_epoch = len(epoch_batches(data.train_features, cfg, 0, world)) // world
    steps_per_epoch = math.ceil(batches_per_epoch / tc.grad_accum)
    total_steps = tc.max_steps or math.ceil(steps_per_epoch * tc.epochs)
    optimizer = build_optimizer(
        model, tc.lr, tc.head_lr, tc.weight_decay, tc.head_lr_exclude, tc.param_lr
    )
    scheduler = linear_warmup_decay(optimizer, int(tc.warmup_ratio * total_steps), total_steps)

    last_dir, best_dir = out / "last", out / "best"
    state = resume_from(
        last_dir, resume, safetensors_loader(model), optimizer, scheduler, cfg.to_dict()
    )
    if state.finished:
        log.info("run already finished")
        return None
    model, optimizer = accelerator.prepare(model, optimizer)
    raw_model = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "config.json", cfg.to_dict())
    log_path = out / "metrics.jsonl"
    if accelerator.is_main_process:
        start_log(log_path, state.global_step)
    decode = DecodeConfig.from_settings(cfg.decode)

    def save_last(metrics: dict[str, Any] | None = None) -> None:
        """The resumable last/ checkpoint; ``metrics`` (with SQuAD 2.0's tuned null
        threshold) when these exact weights were just evaluated, so a model loaded from
        last/ can abstain too."""
        if accelerator.is_main_process:
            save_checkpoint(
                last_dir, raw_model, tokenizer, cfg.to_dict(), state, optimizer, scheduler, metrics
            )
        accelerator.wait_for_everyone()

    stop = StopFlag()
    old_handlers = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    bar = Progress(total_steps, enabled=progress and accelerator.is_main_process)
    best: EvalResult | None = None
    try:
        model.train()
        bar.advance(state.global_step)
        # runs until the final evaluation has been done: a run stopped during its last step
        # resumes straight into that evaluation
        while not state.finished and not stop.stop:
            batches = epoch_batches(data.train_features, cfg, state.epoch, world)[rank::world]
            t0, seen, tokens = time.perf_counter(), 0, 0
            while state.batch_in_epoch < len(batches) and state.global_step < total_steps:
                group = batches[state.batch_in_epoch : state.batch_in_epoch + tc.grad_accum]
                loss_sum, rows, n_tokens = accumulate_step(
                    accelerator,
                    model,
                    optimizer,
                    scheduler,
                    [collate(data.train_features, idx).to(device) for idx in group],
                    lambda i, batch: model(batch).loss,
                    tc.max_grad_norm,
                    bf16,
                )
                seen += rows
                tokens += n_tokens
                state.batch_in_epoch += len(group)
                state.global_step += 1
                rate = seen * world / max(time.perf_counter() - t0, 1e-9)
                bar.update(loss_sum, rate, state.epoch)
                if accelerator.is_main_process and state.global_step % tc.log_every_steps == 0:
                    append_jsonl(
                        log_path,
                        {
                            "step": state.global_step,
                            "epoch": state.epoch,
                            "loss": loss_sum,
                            "lr": scheduler.get_last_lr()[0],
                            "features_per_s": rate,
                            "tokens_per_s": tokens * world / max(time.perf_counter() - t0, 1e-9),
                        },
                    )
                if tc.save_every_steps and state.global_step % tc.save_every_steps == 0:
                    save_last()
                if stop.synced(device):
                    break
            if stop.stop:
                break
            # epoch finished
            state.epoch += 1
            state.batch_in_epoch = 0
            last_epoch = state.global_step >= total_steps
            result = None
            if tc.eval_every_epoch or last_epoch:
                # every process scores a shard of the windows; rank 0 merges and scores
                collector = run_inference(
                    raw_model,
                    data.eval_features,
                    decode,
                    tc.eval_batch_size,
                    bf16,
                    device=device,
                    shard=(rank, world),
                )
                model.train()
                if world > 1:
                    shards = gather_object([collector])
                    collector = shards[0].merge(shards[1:])
                if accelerator.is_main_process:
                    result = score_collector(
                        collector, data.eval_examples, data.eval_features, data.version_2
                    )
            if result is not None:
                entry = {"step": state.global_step, "epoch": state.epoch, "eval": result.metrics}
                append_jsonl(log_path, entry)
                bar.note(f"epoch {state.epoch}: F1 {result.f1:.2f}")
                if result.f1 > state.best_f1:
                    state.best_f1, state.best_epoch, best = result.f1, state.epoch, result
                    save_checkpoint(
                        best_dir,
                        raw_model,
                        tokenizer,
                        cfg.to_dict(),
                        state,
                        metrics=result.metrics_with_threshold(),
                    )
                    write_outputs(result, best_dir)
            accelerator.wait_for_everyone()
            state.finished = state.global_step >= total_steps
            save_last(result.metrics_with_threshold() if result is not None else None)
        if stop.stop and not state.finished:  # (a signal in the final evaluation: done)
            save_last()
            log.warning("stopped at step %d; continue with --resume", state.global_step)
    finally:
        bar.close()
        for s, h in old_handlers.items():
            signal.signal(s, h)
    accelerator.wait_for_everyone()
    if best is None and accelerator.is_main_process and (best_dir / "metrics.json").exists():
        log.info(
            "best checkpoint from an earlier session: %s",
            json.loads((best_dir / "metrics.json").read_text()),
        )
    return best


def accumulate_step(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    batches: list,
    loss_of: Callable[[int, Any], torch.Tensor],
    max_grad_norm: float | None,
    bf16: bool,
    frozen: Sequence[torch.nn.Parameter] = (),
) -> tuple[float, int, int]:
    """One optimizer step over micro-batches: gradients accumulate (DDP syncs only on the
    last one), then clip, step, schedule. Returns (loss, rows, real tokens) of the step.

    Shared by the extractive, pre-training and DROP loops; ``loss_of(i, batch)`` runs the
    forward pass of micro-batch i. The ``frozen`` parameters lose their gradients before
    clipping, so this step leaves them exactly as they are (AdamW skips a parameter without
    a gradient: no update, no weight decay, no moment estimates)."""
    device = accelerator.device
    rows = 0
    losses: list[torch.Tensor] = []
    token_counts: list[torch.Tensor] = []
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        sync = accelerator.num_processes == 1 or last
        ctx = contextlib.nullcontext() if sync else accelerator.no_sync(model)
        with ctx, autocast(device, bf16):
            loss = loss_of(i, batch) / len(batches)
        accelerator.backward(loss)
        # kept on the device: reading them here would wait for the GPU after every
        # micro-batch; they are read once, after the optimizer step
        losses.append(loss.detach().float())
        token_counts.append(batch.attention_mask.sum())
        rows += batch.input_ids.shape[0]
    for p in frozen:
        p.grad = None
    if max_grad_norm:
        accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    loss_sum = float(torch.stack(losses).sum())
    tokens = int(torch.stack(token_counts).sum())
    return loss_sum, rows, tokens


class Progress:
    """A rich progress bar with loss and throughput (silent when disabled)."""

    def __init__(self, total: int, enabled: bool):
        self.enabled = enabled
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            self.task = self.p.add_task("train", total=total, info="")
            self.p.start()

    def advance(self, n: int) -> None:
        if self.enabled and n:
            self.p.update(self.task, advance=n)

    def update(self, loss: float, rate: float, epoch: int) -> None:
        if self.enabled:
            self.p.update(
                self.task, advance=1, info=f"epoch {epoch + 1} loss {loss:.3f} {rate:.1f} feat/s"
            )

    def note(self, text: str) -> None:
        if self.enabled:
            self.p.console.log(text)

    def close(self) -> None:
        if self.enabled:
            self.p.stop()
