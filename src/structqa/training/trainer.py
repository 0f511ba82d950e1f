"""The training scaffold every task shares: one explicit loop, read top to bottom.

:func:`fit` owns what does not depend on the task: the seeded batch order of each epoch,
optimizer steps with gradient accumulation, bf16 autocast, HF Accelerate (one CPU, one GPU,
or many processes under ``accelerate launch``, each taking every world_size-th batch), the
evaluation cadence, the ``best/``, ``last/`` and ``final/`` checkpoints (each written aside
and swapped in), exact resume, the JSONL log and SIGINT/SIGTERM. A task supplies only what is
its own (:class:`Task`): batches, a loss, an evaluation, and how its checkpoints are written
and read. The three tasks: extractive QA (:mod:`structqa.training.loop`), masked-LM
pre-training (:mod:`structqa.pretrain.loop`), GenBERT / NC-BERT on DROP
(:mod:`structqa.ncbert.loop`). No callbacks: evaluation, logging and saving are plain calls.

The run, step by step (``Settings`` names the knobs):

- an evaluation at step 0 when ``eval_at_start`` (pre-training's starting point);
- each optimizer step takes ``grad_accum`` micro-batches of the epoch's order, logs its loss
  every ``log_every_steps`` steps, evaluates every ``eval_every_steps`` steps inside an
  epoch, saves ``last/`` every ``save_every_steps`` steps, and then stops if a signal came;
- at each epoch end (and when the step budget is spent) it evaluates when ``eval_every_epoch``
  (always when the budget is spent), keeps ``best/`` when the task's score beats the best so
  far, writes ``final/`` at the very end if ``final_dir`` is set, and saves ``last/``
  (resumable: optimizer, scheduler, RNG and the position inside the epoch).

A signal stops after the current step (every process after the same step) and saves
``last/``; ``--resume`` continues exactly where it stopped, also straight into an epoch-end or
final evaluation the signal cut off. Evaluations are labelled with the epoch they belong to:
for a run budgeted in epochs (``epochs`` set) the 1-based epoch in progress or just finished,
for one budgeted in steps only (pre-training) the epochs completed before it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from accelerate import Accelerator

from structqa.config import Optimisation
from structqa.features.batching import length_grouped_batches
from structqa.io import append_jsonl, write_json
from structqa.runtime import autocast, use_bf16
from structqa.training.checkpoint import (
    TrainState,
    check_same_choice,
    check_same_data,
    check_same_precision,
    record_stint,
    resume_from,
    safetensors_loader,
    save_checkpoint,
    start_log,
)
from structqa.training.optim import build_optimizer, linear_warmup_decay
from structqa.training.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """What the scaffold needs to know of a run. :meth:`from_config` takes the fields a task's
    ``train`` config section shares with it; the rest are the task's choices."""

    output_dir: str
    config: dict[str, Any]  # the resolved config: config.json, checkpoints, resume check
    seed: int = 0
    lr: float = 1e-4
    head_lr: float | None = None
    head_lr_exclude: Sequence[str] = ()
    param_lr: Mapping[str, float] = field(default_factory=dict)
    weight_decay: float = 0.01
    batch_size: int = 12
    grad_accum: int = 1
    epochs: float | None = None  # None: a run budgeted in steps only
    max_steps: int | None = None  # overrides epochs when set
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = 1.0
    bf16: str = "auto"
    eval_every_epoch: bool = True  # (the end of the step budget is always evaluated)
    eval_every_steps: int | None = None  # inside an epoch
    save_every_steps: int | None = None  # resumable last/ inside an epoch
    log_every_steps: int = 10
    freeze_steps: int = 0  # the ``frozen`` parameters stay fixed for this many steps
    frozen: Sequence[torch.nn.Parameter] = ()
    eval_at_start: bool = False  # evaluate the starting point (step 0) of a fresh run
    final_dir: str | None = None  # a non-resumable copy of the finished weights, e.g. "final"
    unit: str = "features"  # what a batch row is, for the throughput log ("<unit>_per_s")
    config_file: str = "structqa_config.json"  # where a checkpoint holds its config
    reports: Mapping[str, Any] = field(default_factory=dict)  # more files of the run dir

    @classmethod
    def from_config(cls, train: Optimisation, config: dict[str, Any], **choices: Any) -> Settings:
        """A task's settings from its train section (an :class:`Optimisation`, with the
        fields of these settings that the task shares by name) and the task's own ``choices``."""
        names = {f.name for f in dataclasses.fields(cls)}
        shared = {k: v for k, v in vars(train).items() if k in names}
        return cls(config=config, **{**shared, **choices})

    def total_steps(self, batches_per_epoch: int) -> int:
        if self.epochs is None:
            return int(self.max_steps or 0)
        return self.max_steps or math.ceil(
            math.ceil(batches_per_epoch / self.grad_accum) * self.epochs
        )


@dataclass(frozen=True)
class Env:
    """Where this process trains: the Accelerator and whether bf16 autocast is on."""

    accelerator: Accelerator
    bf16: bool

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process


@dataclass(frozen=True)
class Evaluation:
    """One evaluation, as the main process saw it (other processes get None from a task)."""

    metrics: dict[str, Any]  # logged in metrics.jsonl under "eval"
    note: str  # the progress line
    # higher is better, >= 0 (F1-like): best/ keeps the highest (None: no best/)
    score: float | None = None
    saved: dict[str, Any] | None = None  # metrics.json of a checkpoint of these weights
    value: Any = None  # what the task's train() returns for it
    outputs: Callable[[Path], None] | None = None  # writes its outputs (predictions) into best/


class Task(Protocol):
    """What a training task supplies; :func:`fit` does the rest."""

    lengths: Sequence[int]  # of the training examples, for the length-grouped batch order

    def batch(self, indices: list[int], epoch: int) -> Any:
        """The training batch of these examples (on the CPU; ``fit`` moves it)."""

    def loss(
        self, model: torch.nn.Module, batch: Any, env: Env, step: int, micro: int
    ) -> torch.Tensor:
        """The loss of micro-batch ``micro`` of optimizer step ``step`` (0-based), through
        ``model`` as prepared by Accelerate (DDP-wrapped under several processes)."""

    def evaluate(self, model: torch.nn.Module, env: Env) -> Evaluation | None:
        """Evaluate the (unwrapped) model; None on processes other than the main one."""

    def save(
        self,
        target: Path,
        model: torch.nn.Module,
        state: TrainState,
        optimizer: torch.optim.Optimizer | None,
        scheduler: Any,
        metrics: dict[str, Any] | None,
    ) -> None:
        """Write a checkpoint directory atomically (with the resume state if ``optimizer``)."""

    def load(self, model: torch.nn.Module, path: Path) -> None:
        """Load the weights of a checkpoint written by :meth:`save` into ``model`` in place."""


@dataclass
class CheckpointedTask:
    """A task's tokenizer and resolved config, and ``save``/``load`` of structqa's own
    checkpoint layout (:func:`save_checkpoint`: model.safetensors, structqa_config.json,
    encoder_config.json, the tokenizer); a task with another layout sets ``write`` (a
    function of save_checkpoint's signature) and overrides ``load``."""

    tokenizer: Any
    config: dict[str, Any]
    write = staticmethod(save_checkpoint)  # (target, model, tokenizer, config, state, ...)

    def save(self, target: Path, model: torch.nn.Module, *rest: Any) -> None:
        """:meth:`Task.save`; ``rest``: state, optimizer, scheduler, metrics."""
        self.write(target, model, self.tokenizer, self.config, *rest)

    def load(self, model: torch.nn.Module, path: Path) -> None:
        safetensors_loader(model)(path)


class StopFlag:
    """Set by SIGINT/SIGTERM; the loop checks it after each step and saves before stopping.

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


def start_accelerator(bf16_setting: str) -> tuple[Accelerator, bool]:
    """The Accelerator, and whether bf16 autocast is on for its device.

    Autocast is ours (the same code on CPU and GPU); cpu=True lets Accelerate start gloo
    processes on a machine without CUDA; CPU runs are made deterministic."""
    accelerator = Accelerator(mixed_precision="no", cpu=not torch.cuda.is_available())
    device = accelerator.device
    bf16 = use_bf16(bf16_setting, device)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    log.info("device %s, %d process(es), bf16 %s", device, accelerator.num_processes, bf16)
    return accelerator, bf16


def epoch_order(
    lengths: Sequence[int], batch_size: int, seed: int, epoch: int, world: int
) -> list[list[int]]:
    """The batch order of one epoch: a function of (seed, epoch) only, so resume can rebuild
    it; cut to a multiple of ``world`` so that every process gets the same number."""
    batches = length_grouped_batches(list(lengths), batch_size, seed=seed * 100_003 + epoch)
    return batches[: len(batches) - len(batches) % world]


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

    ``loss_of(i, batch)`` runs the forward pass of micro-batch i. The ``frozen`` parameters
    lose their gradients before clipping, so this step leaves them exactly as they are (AdamW
    skips a parameter without a gradient: no update, no weight decay, no moment estimates)."""
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
    return float(torch.stack(losses).sum()), rows, int(torch.stack(token_counts).sum())


def fit(
    task: Task,
    model: torch.nn.Module,
    s: Settings,
    resume: bool = False,
    progress: bool = True,
) -> Any:
    """Train ``model`` on ``task`` as ``s`` says (resuming from ``<output_dir>/last`` with
    ``resume``). Returns, on the main process, the ``value`` of this stint's best evaluation
    by the task's score, or for a task without a score of the final one; None when there is
    none (another process, a run already finished, stopped, or no improvement)."""
    out = Path(s.output_dir)
    env = Env(*start_accelerator(s.bf16))
    accelerator, device, world, rank = env.accelerator, env.device, env.world, env.rank
    batches_per_epoch = len(epoch_order(task.lengths, s.batch_size, s.seed, 0, world)) // world
    if not task.lengths:
        raise ValueError(
            f"{out}: nothing to train on: no training window was made (no question with an "
            "answer located in its context, or none at all: the data reports above say which "
            "were skipped); check the answers' answer_start"
        )
    if not batches_per_epoch:
        raise ValueError(
            f"{out}: the training data has {len(task.lengths)} examples: too few for one batch "
            f"of {s.batch_size} per process ({world}); lower train.batch_size or add data"
        )
    total_steps = s.total_steps(batches_per_epoch)
    optimizer = build_optimizer(
        model, s.lr, s.head_lr, s.weight_decay, s.head_lr_exclude, s.param_lr
    )
    scheduler = linear_warmup_decay(optimizer, int(s.warmup_ratio * total_steps), total_steps)

    last_dir, best_dir = out / "last", out / "best"
    state = resume_from(
        last_dir,
        resume,
        lambda path: task.load(model, path),
        optimizer,
        scheduler,
        s.config,
        s.config_file,
    )
    # checked for a finished run too: its calibration and test, after this, read best/
    digest = getattr(task, "data_digest", None)  # a task's own digest of its windows
    check_same_data(last_dir, state, task.lengths, digest() if callable(digest) else None)
    choice = getattr(task, "choice_digest", None)  # and of the questions choosing best/
    if callable(choice):
        check_same_choice(last_dir, state, choice())
    if state.finished:
        log.info("%s: run already finished", out)
        return None
    check_same_precision(last_dir, state, env.bf16, s.bf16)
    record_stint(state, device)
    model, optimizer = accelerator.prepare(model, optimizer)
    raw_model = accelerator.unwrap_model(model)
    log_path = out / "metrics.jsonl"
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        for name, content in {"config.json": s.config, **s.reports}.items():
            write_json(out / name, content)
        start_log(log_path, state.global_step)

    started, before = time.perf_counter(), state.seconds

    def clock() -> None:
        """The train state's time: what earlier starts spent, plus this one's so far."""
        state.seconds = round(before + time.perf_counter() - started, 1)

    def save(target: Path, metrics: dict[str, Any] | None = None, resumable: bool = True) -> None:
        clock()
        if accelerator.is_main_process:
            opt, sched = (optimizer, scheduler) if resumable else (None, None)
            task.save(target, raw_model, state, opt, sched, metrics)
        accelerator.wait_for_everyone()

    def evaluate(epoch: int) -> Evaluation | None:
        """Evaluate (every process calls the task; the main one gets the result), log it
        under ``epoch`` and keep ``best/`` when the score beats the best so far."""
        nonlocal best
        evaluation = task.evaluate(raw_model, env)
        model.train()
        if evaluation is not None:
            entry = {"step": state.global_step, "epoch": epoch, "eval": evaluation.metrics}
            append_jsonl(log_path, entry)
            bar.note(f"step {state.global_step}: {evaluation.note}")
            if evaluation.score is not None and evaluation.score > state.best_f1:
                state.best_f1, state.best_epoch, best = evaluation.score, epoch, evaluation
                clock()
                task.save(best_dir, raw_model, state, None, None, evaluation.saved)
                if evaluation.outputs is not None:
                    evaluation.outputs(best_dir)
        accelerator.wait_for_everyone()
        return evaluation

    counts_epochs = s.epochs is not None
    stop = StopFlag()
    old_handlers = {n: signal.signal(n, stop) for n in (signal.SIGINT, signal.SIGTERM)}
    mode = ("bar" if progress else "lines") if accelerator.is_main_process else "off"
    bar = Progress(total_steps, mode)
    best: Evaluation | None = None
    try:
        model.train()
        bar.advance(state.global_step)
        if s.eval_at_start and state.global_step == state.batch_in_epoch == 0 and total_steps:
            evaluate(state.epoch)
        # runs until the final evaluation has been done: a run stopped during its last step
        # resumes straight into that evaluation
        while not state.finished and not stop.stop:
            order = epoch_order(task.lengths, s.batch_size, s.seed, state.epoch, world)
            batches = order[rank::world]
            t0, seen, tokens = time.perf_counter(), 0, 0
            while state.batch_in_epoch < len(batches) and state.global_step < total_steps:
                group = batches[state.batch_in_epoch : state.batch_in_epoch + s.grad_accum]
                step = state.global_step
                loss, rows, n_tokens = accumulate_step(
                    accelerator,
                    model,
                    optimizer,
                    scheduler,
                    [task.batch(idx, state.epoch).to(device) for idx in group],
                    lambda i, batch, step=step: task.loss(model, batch, env, step, i),
                    s.max_grad_norm,
                    env.bf16,
                    s.frozen if step < s.freeze_steps else (),
                )
                seen += rows
                tokens += n_tokens
                state.batch_in_epoch += len(group)
                state.global_step = step = step + 1
                elapsed = max(time.perf_counter() - t0, 1e-9)
                bar.update(loss, seen * world / elapsed, state.epoch)
                if accelerator.is_main_process and step % s.log_every_steps == 0:
                    append_jsonl(
                        log_path,
                        {
                            "step": step,
                            "epoch": state.epoch,
                            "loss": loss,
                            "lr": scheduler.get_last_lr()[0],
                            f"{s.unit}_per_s": seen * world / elapsed,
                            "tokens_per_s": tokens * world / elapsed,
                        },
                    )
                # the step cadence (even when stopping: a resumed run would not redo it);
                # the epoch's and the budget's ends are evaluated below
                epoch_end, budget_end = state.batch_in_epoch >= len(batches), step >= total_steps
                inside = not epoch_end and not budget_end
                if _due(step, s.eval_every_steps) and not budget_end:
                    if inside or not s.eval_every_epoch:
                        evaluate(state.epoch + 1 if counts_epochs else state.epoch)
                if inside and _due(step, s.save_every_steps):
                    save(last_dir)
                if stop.synced(device):
                    break
            if stop.stop:
                break
            # the epoch is over, or the step budget spent: evaluate, keep the best, save
            epoch_over = state.batch_in_epoch >= len(batches)
            if epoch_over or counts_epochs:  # (a run budgeted in epochs ends its last one)
                state.epoch += 1
                state.batch_in_epoch = 0
            final = state.global_step >= total_steps
            evaluation = None
            if final or (s.eval_every_epoch and epoch_over):
                evaluation = evaluate(state.epoch)
            metrics = evaluation.saved if evaluation is not None else None
            state.finished = final
            if final and evaluation is not None and evaluation.score is None:
                best = evaluation
            if final and s.final_dir:
                save(out / s.final_dir, metrics, resumable=False)
            save(last_dir, metrics)
        if stop.stop and not state.finished:  # (a signal in the final evaluation: done)
            save(last_dir)
            log.warning("stopped at step %d; continue with --resume", state.global_step)
    finally:
        bar.close()
        for n, handler in old_handlers.items():
            signal.signal(n, handler)
    accelerator.wait_for_everyone()
    if best is None and accelerator.is_main_process:
        for name in ("best", s.final_dir):
            if name and (out / name / "metrics.json").exists():
                kept = json.loads((out / name / "metrics.json").read_text())
                log.info("%s/ from an earlier stint: %s", name, kept)
    return best.value if best is not None else None


def _due(step: int, every: int | None) -> bool:
    return bool(every) and step % every == 0


__all__ = [
    "CheckpointedTask",
    "Env",
    "Evaluation",
    "Settings",
    "StopFlag",
    "Task",
    "accumulate_step",
    "epoch_order",
    "fit",
    "start_accelerator",
]
