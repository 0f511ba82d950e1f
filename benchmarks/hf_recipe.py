"""The standard Hugging Face extractive-QA recipe, as a baseline for ``bench_vs_hf.py``.

Our own implementation of what the transformers ``run_qa.py`` example does with
``AutoModelForQuestionAnswering`` and the Trainer defaults:

* features: the fast tokenizer with ``truncation="only_second"``, ``max_length`` 384,
  ``stride`` 128, overflowing windows, offsets, every window padded to ``max_length``;
  training windows target [CLS] unless they contain the whole first answer; evaluation
  windows keep offsets only for context tokens (``None`` elsewhere) and their example index.
* training: AdamW (the Trainer's default ``adamw_torch_fused`` where torch has it), lr 3e-5,
  weight decay 0 (not on biases and LayerNorm weights when > 0), linear decay with optional
  warm-up, gradient clipping at 1.0, fp32, a reshuffled order every epoch from the seed.
* inference: fixed-size batches of padded windows in fp32; logits gathered as numpy arrays.
* post-processing: the example's per-window Python double loop over the top ``n_best``
  start and end indexes, skipping spans outside the context, reversed or too long, then the
  best start+end logit sum per question (with the n-best softmax, as the example writes it).

Dimension letters: F windows (features), N = max_length tokens.
"""

from __future__ import annotations

import math
import random
import shutil
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from harness import sync

from structqa.data.records import Example

Offsets = list[tuple[int, int] | None]


@dataclass
class HFTrainFeatures:
    """Padded training windows: (F, N) int64 tensors plus (F,) start/end targets."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    start_positions: torch.Tensor
    end_positions: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def subset(self, n: int) -> HFTrainFeatures:
        return HFTrainFeatures(*(t[:n] for t in self.tensors()))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.input_ids,
            self.attention_mask,
            self.token_type_ids,
            self.start_positions,
            self.end_positions,
        )


@dataclass
class HFEvalFeatures:
    """Padded evaluation windows with, per window, its example index and context offsets."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    example_index: list[int]
    offsets: list[Offsets]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def load_hf_model(path: str | Path, attention_dropout: float | None = None):
    """``AutoModelForQuestionAnswering`` on the encoder checkpoint: ``qa_outputs`` is new."""
    from transformers import AutoConfig, AutoModelForQuestionAnswering
    from transformers.utils import logging as hf_logging

    config = AutoConfig.from_pretrained(str(path))
    if attention_dropout is not None:
        config.attention_probs_dropout_prob = attention_dropout
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the "newly initialized qa_outputs" notice is expected
    try:
        model = AutoModelForQuestionAnswering.from_pretrained(str(path), config=config)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model


def _tokenize(examples: Sequence[Example], tokenizer, max_length: int, stride: int):
    return tokenizer(
        [ex.question.lstrip() for ex in examples],  # run_qa strips leading whitespace
        [ex.context for ex in examples],
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_token_type_ids=True,
        padding="max_length",
    )


def _context_range(seq_ids: list[int | None]) -> tuple[int, int]:
    """First and last token index of the context (sequence id 1) in one window."""
    first = seq_ids.index(1)
    last = len(seq_ids) - 1 - seq_ids[::-1].index(1)
    return first, last


def answer_positions(
    offsets: Sequence[tuple[int, int]], seq_ids: list[int | None], example: Example, cls: int
) -> tuple[int, int]:
    """Token targets of one training window, following run_qa's prepare_train_features: the
    first answer's token span when the window holds all of it, else (cls, cls).

    The scans stay inside the context tokens (run_qa's start scan may run past them when the
    answer starts in the window's last context token; the intent is the same)."""
    if not example.answers or example.answers[0].start < 0:
        return cls, cls
    start_char, end_char = example.answers[0].start, example.answers[0].end
    first, last = _context_range(seq_ids)
    if offsets[first][0] > start_char or offsets[last][1] < end_char:
        return cls, cls
    start = first
    while start + 1 <= last and offsets[start + 1][0] <= start_char:
        start += 1
    end = last
    while end - 1 >= first and offsets[end - 1][1] >= end_char:
        end -= 1
    return start, end


def prepare_train_features(
    examples: Sequence[Example], tokenizer, max_length: int = 384, stride: int = 128
) -> HFTrainFeatures:
    enc = _tokenize(examples, tokenizer, max_length, stride)
    starts: list[int] = []
    ends: list[int] = []
    for f, sample in enumerate(enc["overflow_to_sample_mapping"]):
        cls = enc["input_ids"][f].index(tokenizer.cls_token_id)
        offsets, seq_ids = enc["offset_mapping"][f], enc.sequence_ids(f)
        s, e = answer_positions(offsets, seq_ids, examples[sample], cls)
        starts.append(s)
        ends.append(e)
    return HFTrainFeatures(
        input_ids=torch.tensor(enc["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(enc["attention_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(enc["token_type_ids"], dtype=torch.long),
        start_positions=torch.tensor(starts, dtype=torch.long),
        end_positions=torch.tensor(ends, dtype=torch.long),
    )


def prepare_validation_features(
    examples: Sequence[Example], tokenizer, max_length: int = 384, stride: int = 128
) -> HFEvalFeatures:
    enc = _tokenize(examples, tokenizer, max_length, stride)
    offsets: list[Offsets] = []
    for f in range(len(enc["input_ids"])):
        pairs = zip(enc["offset_mapping"][f], enc.sequence_ids(f), strict=True)
        offsets.append([tuple(o) if s == 1 else None for o, s in pairs])
    return HFEvalFeatures(
        input_ids=torch.tensor(enc["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(enc["attention_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(enc["token_type_ids"], dtype=torch.long),
        example_index=list(enc["overflow_to_sample_mapping"]),
        offsets=offsets,
    )


# ---- training ------------------------------------------------------------------------------


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float):
    """The Trainer's AdamW groups (no decay on biases and LayerNorm weights)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True), True
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8), False


def linear_schedule(optimizer, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled window order of one epoch (a function of seed and epoch, for resume)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def batch_sizes(n: int, batch_size: int) -> list[int]:
    """Sizes of the batches of one epoch (no drop_last, as the Trainer)."""
    return [min(batch_size, n - i) for i in range(0, n, batch_size)]


@dataclass
class HFTrainConfig:
    lr: float = 3e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    batch_size: int = 12
    epochs: float = 2.0
    max_steps: int | None = None
    max_grad_norm: float = 1.0
    seed: int = 0
    save_every_steps: int | None = None  # resumable checkpoints (also at SIGTERM/SIGINT)
    checkpoint_dir: str | None = None


@dataclass
class HFTrainResult:
    steps_done: int  # optimizer steps taken in this call
    global_step: int
    total_steps: int
    finished: bool
    features: int  # windows processed in this call
    seconds: float  # wall time of the training loop in this call
    step_times: list[float] = field(default_factory=list)  # seconds per step in this call
    step_features: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    fused_adamw: bool = False


def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_hf_checkpoint(target: Path, model, optimizer, scheduler, progress: dict) -> None:
    """Model + optimizer + scheduler + position + RNG, written to a temp dir then swapped in."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "progress": progress,
            "rng": _rng_state(),
        },
        tmp / "checkpoint.pt",
    )
    old = target.with_name(target.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)


def train_hf(
    model,
    features: HFTrainFeatures,
    cfg: HFTrainConfig,
    device: torch.device,
    log: Callable[[str], None] = print,
) -> HFTrainResult:
    """Plain PyTorch training equivalent to ``Trainer.train()`` with the defaults above.

    With ``checkpoint_dir``, resumes from ``checkpoint_dir/checkpoint.pt`` when it exists and
    saves there every ``save_every_steps`` steps, at the end and on SIGTERM/SIGINT (then
    returns with ``finished=False``)."""
    n = len(features)
    sizes = batch_sizes(n, cfg.batch_size)
    total = cfg.max_steps or math.ceil(len(sizes) * cfg.epochs)
    model.to(device)
    optimizer, fused = build_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = linear_schedule(optimizer, int(cfg.warmup_ratio * total), total)
    progress = {"epoch": 0, "batch_in_epoch": 0, "global_step": 0}
    ckpt = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    if ckpt is not None and (ckpt / "checkpoint.pt").exists():
        state = torch.load(ckpt / "checkpoint.pt", map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        progress = dict(state["progress"])
        _set_rng_state(state["rng"])
        log(f"HF: resumed at step {progress['global_step']} of {total}")
    tensors = [t for t in features.tensors()]
    stop = {"flag": False}

    def on_signal(signum, frame) -> None:  # noqa: ARG001
        log(f"HF: signal {signum}: saving a checkpoint after this step")
        stop["flag"] = True

    handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    result = HFTrainResult(0, progress["global_step"], total, False, 0, 0.0, fused_adamw=fused)
    model.train()
    sync(device)
    t_start = time.perf_counter()
    try:
        while progress["global_step"] < total and not stop["flag"]:
            order = epoch_order(n, cfg.seed, progress["epoch"])
            while progress["batch_in_epoch"] < len(sizes) and progress["global_step"] < total:
                t0 = time.perf_counter()
                b = progress["batch_in_epoch"]
                idx = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
                ids, mask, types, starts, ends = (t[idx].to(device) for t in tensors)
                out = model(
                    input_ids=ids,
                    attention_mask=mask,
                    token_type_ids=types,
                    start_positions=starts,
                    end_positions=ends,
                )
                out.loss.backward()
                if cfg.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                loss = float(out.loss.detach())  # syncs, like the Trainer's loss logging
                progress["batch_in_epoch"] += 1
                progress["global_step"] += 1
                result.steps_done += 1
                result.features += len(idx)
                result.step_times.append(time.perf_counter() - t0)
                result.step_features.append(len(idx))
                result.losses.append(loss)
                step = progress["global_step"]
                if step % 50 == 0:
                    log(f"HF: step {step}/{total} loss {loss:.3f}")
                if ckpt and cfg.save_every_steps and step % cfg.save_every_steps == 0:
                    save_hf_checkpoint(ckpt, model, optimizer, scheduler, progress)
                if stop["flag"]:
                    break
            if progress["batch_in_epoch"] >= len(sizes):
                progress["epoch"] += 1
                progress["batch_in_epoch"] = 0
        sync(device)
        result.seconds = time.perf_counter() - t_start
        result.global_step = progress["global_step"]
        result.finished = progress["global_step"] >= total
        if ckpt is not None:
            save_hf_checkpoint(ckpt, model, optimizer, scheduler, progress)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return result


# ---- inference and post-processing ----------------------------------------------------------


@torch.inference_mode()
def hf_forward(
    model, features: HFEvalFeatures, batch_size: int, device: torch.device
) -> tuple[np.ndarray, np.ndarray, float]:
    """Start and end logits (F, N) as float32 numpy arrays, and the seconds it took."""
    model.to(device)
    was_training = model.training
    model.eval()
    starts, ends = [], []
    sync(device)
    t0 = time.perf_counter()
    for i in range(0, len(features), batch_size):
        out = model(
            input_ids=features.input_ids[i : i + batch_size].to(device),
            attention_mask=features.attention_mask[i : i + batch_size].to(device),
            token_type_ids=features.token_type_ids[i : i + batch_size].to(device),
        )
        starts.append(out.start_logits.float().cpu().numpy())
        ends.append(out.end_logits.float().cpu().numpy())
    start_logits, end_logits = np.concatenate(starts), np.concatenate(ends)
    seconds = time.perf_counter() - t0
    model.train(was_training)
    return start_logits, end_logits, seconds


def postprocess_predictions(
    examples: Sequence[Example],
    features: HFEvalFeatures,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best: int = 20,
    max_answer_length: int = 30,
) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]]]:
    """run_qa-style post-processing: answers by question id, and each question's n-best."""
    windows: dict[int, list[int]] = defaultdict(list)
    for f, e in enumerate(features.example_index):
        windows[e].append(f)
    answers: dict[str, str] = {}
    nbest_all: dict[str, list[dict[str, Any]]] = {}
    for e, ex in enumerate(examples):
        candidates: list[dict[str, Any]] = []
        for f in windows[e]:
            s_logits, e_logits, offsets = start_logits[f], end_logits[f], features.offsets[f]
            top_starts = np.argsort(-s_logits, kind="stable")[:n_best].tolist()
            top_ends = np.argsort(-e_logits, kind="stable")[:n_best].tolist()
            for s in top_starts:
                for t in top_ends:
                    if s >= len(offsets) or t >= len(offsets):
                        continue
                    if offsets[s] is None or offsets[t] is None:
                        continue
                    if t < s or t - s + 1 > max_answer_length:
                        continue
                    candidates.append(
                        {
                            "offsets": (offsets[s][0], offsets[t][1]),
                            "score": float(s_logits[s] + e_logits[t]),
                            "start_logit": float(s_logits[s]),
                            "end_logit": float(e_logits[t]),
                        }
                    )
        candidates.sort(key=lambda c: c["score"], reverse=True)
        best = candidates[:n_best]
        for c in best:
            c["text"] = ex.context[c["offsets"][0] : c["offsets"][1]]
        if not best:
            best = [{"text": "", "score": 0.0, "start_logit": 0.0, "end_logit": 0.0}]
        scores = np.array([c["score"] for c in best])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        for c, p in zip(best, probs, strict=True):
            c["probability"] = float(p)
        answers[ex.id] = best[0]["text"]
        nbest_all[ex.id] = best
    return answers, nbest_all
