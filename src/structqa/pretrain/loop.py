"""The pre-training loop: continued masked-LM training, read top to bottom (Accelerate below).

The same shape as :mod:`structqa.training.loop`: one process or many under ``accelerate
launch`` (each takes every world_size-th batch of the same seeded, length-grouped order),
bf16 autocast where native, SIGINT/SIGTERM stop after the current step and save ``last/`` so
that ``--resume`` continues exactly (weights, optimizer, scheduler, RNG, position in the epoch;
masks depend only on (seed, window id, epoch)). The held-out MLM loss and accuracy (on the
masked positions) are measured at step 0, every ``eval_every_steps`` and at the end.

``last/`` and ``final/`` are HF ``BertForMaskedLM`` directories (``config.json`` with
``structqa_block``, ``model.safetensors`` with the encoder and the MLM head under HF names,
tokenizer files), so ``structqa train --model.encoder=RUN/final`` fine-tunes the result, and a
later ``structqa pretrain`` continues from it with its head. ``last/`` also holds the resume
state (``train_state.json``, ``resume.pt``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed

from structqa.encoders import (
    attention_options,
    build_encoder,
    convert_stacking,
    entity_keys_if,
    load_encoder,
)
from structqa.encoders.bert import EncoderConfig
from structqa.features.batching import length_grouped_batches, sorted_batches
from structqa.io import append_jsonl, write_json
from structqa.models.build import load_tokenizer, resolve_encoder_path, set_dropout
from structqa.pretrain.config import SCRATCH, PretrainConfig, validate
from structqa.pretrain.data import (
    Chunk,
    MLMBatch,
    MLMDataset,
    PretrainData,
    prepare_pretrain_data,
)
from structqa.pretrain.masking import IGNORE_INDEX
from structqa.pretrain.mlm_head import MaskedLM, ensure_mlm_head
from structqa.pretrain.np_tokenizer import collect_np_words, extend_embeddings, extend_tokenizer
from structqa.provenance import git_info, machine_info
from structqa.runtime import autocast
from structqa.text.annotate import NUM_POS_IDS
from structqa.training.checkpoint import (
    TrainState,
    resume_from,
    save_resume_state,
    seal_checkpoint,
    start_log,
)
from structqa.training.loop import Progress, StopFlag, accumulate_step, start_accelerator
from structqa.training.optim import build_optimizer, linear_warmup_decay

log = logging.getLogger(__name__)

CONFIG_FILE = "structqa_pretrain_config.json"


@dataclass(frozen=True)
class MLMEval:
    """Held-out masked-LM quality: mean cross-entropy and accuracy over the masked tokens."""

    loss: float
    accuracy: float
    masked_tokens: int
    windows: int

    @property
    def metrics(self) -> dict[str, float | int]:
        return {
            "mlm_loss": self.loss,
            "mlm_accuracy": self.accuracy,
            "masked_tokens": self.masked_tokens,
            "windows": self.windows,
        }


# ---- model -----------------------------------------------------------------------------------


def build_pretrain_model(cfg: PretrainConfig) -> tuple[MaskedLM, Any]:
    """The encoder (loaded, converted to ``model.block`` and attention variants, or built from
    scratch) with a tied MLM head (the checkpoint's, else a fresh one), and the tokenizer.

    Masking scheme ``word_pos`` gives an encoder without one a zero-initialized POS-tag input
    embedding (the step-0 function is the checkpoint's); a checkpoint's table is always kept.
    """
    m = cfg.model
    attention = m.attention()
    if m.encoder == SCRATCH:
        tok_path = resolve_encoder_path(m.tokenizer)
        tokenizer = load_tokenizer(tok_path)
        enc_cfg = EncoderConfig(
            vocab_size=len(tokenizer),
            hidden_size=m.hidden,
            num_layers=m.layers,
            num_heads=m.heads,
            intermediate_size=m.intermediate or 4 * m.hidden,
            max_position_embeddings=max(512, cfg.data.max_seq_len),
            pad_token_id=int(tokenizer.pad_token_id or 0),
            block=tuple(m.block or ("sa", "ffn")),
        )
        encoder = build_encoder(enc_cfg, attention)
        head_source = None
    else:
        path = resolve_encoder_path(m.encoder)
        tokenizer = load_tokenizer(path)
        encoder = load_encoder(path)
        if attention.plain:  # the config adds variants; it never strips a checkpoint's
            attention = attention_options(encoder)
        block = tuple(m.block) if m.block is not None else encoder.config.block
        if block != encoder.config.block or attention != attention_options(encoder):
            before = encoder.config.block
            encoder = convert_stacking(encoder, block, attention, added_init=m.added_init)
            log.info("converted the encoder %s -> %s (%s)", before, block, attention)
        head_source = path
    if cfg.masking.scheme == "word_pos" and not encoder.config.pos_vocab_size:
        encoder.add_pos_tag_embeddings(NUM_POS_IDS)
    set_dropout(encoder, m.dropout, m.attention_dropout)
    # A fresh head's init must not depend on how much RNG the conversion consumed: seed it, so
    # the same checkpoint gets the same head under every block (the step-0 function matches).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed)
        head = ensure_mlm_head(encoder, head_source)
    return MaskedLM(encoder, head), tokenizer


def add_np_vocabulary(
    cfg: PretrainConfig,
    model: MaskedLM,
    tokenizer: Any,
    train_chunks: list[Chunk],
    words: list[str] | None = None,
) -> tuple[Any, list[str]]:
    """ANNA's tokenizer: the ``model.np_vocab`` most frequent noun-phrase words of the training
    chunks that ``tokenizer`` splits, added whole (tokenizer and embeddings, in place on the
    model). Returns the extended tokenizer and the words added, in id order. ``words`` skips
    the collection (a resumed run passes the ones its first session added)."""
    if words is None:
        texts = [c.text for c in train_chunks]
        annotations = [c.annotation for c in train_chunks]
        if any(a is None for a in annotations):  # (prepare_pretrain_data annotates them all)
            raise ValueError("noun-phrase vocabulary: some training chunks have no annotation")
        words = collect_np_words(
            texts,
            tokenizer,
            annotations,  # type: ignore[arg-type]
            min_count=cfg.model.np_min_count,
            max_new=cfg.model.np_vocab,
        )
    try:
        extended = extend_tokenizer(tokenizer, words)
    except ValueError as err:
        raise ValueError(f"model.np_vocab: {err} (model.encoder={cfg.model.encoder})") from None
    extend_embeddings(model, extended, words, tokenizer)
    added = extended.convert_ids_to_tokens(list(range(len(tokenizer), len(extended))))
    log.info(
        "noun-phrase vocabulary: %d words added (%s%s)",
        len(added),
        ", ".join(added[:8]),
        ", ..." if len(added) > 8 else "",
    )
    return extended, added


def _forward(model, raw_model: MaskedLM, batch: MLMBatch):
    with entity_keys_if(raw_model.encoder, batch.entity_mask):
        return model(
            batch.input_ids,
            batch.attention_mask,
            labels=batch.labels,
            pos_tag_ids=batch.pos_tag_ids,
        )


@torch.no_grad()
def evaluate_mlm(
    model: MaskedLM, data: MLMDataset, batch_size: int, device: torch.device, bf16: bool
) -> MLMEval:
    """Held-out MLM loss and accuracy; every window masked as in epoch 0."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for idx in sorted_batches(data.lengths, batch_size):
        batch = data.batch(idx, epoch=0).to(device)
        with autocast(device, bf16):
            out = _forward(model, model, batch)  # logits (M, V) of the labeled tokens
        picked = out.logits
        gold = batch.labels[batch.labels != IGNORE_INDEX]
        loss_sum += float(out.loss) * len(gold)  # the mean over them, back to a sum
        correct += int((picked.argmax(-1) == gold).sum())
        count += len(gold)
    model.train(was_training)
    n = max(count, 1)
    return MLMEval(loss_sum / n, correct / n, count, len(data))


# ---- checkpoints -----------------------------------------------------------------------------


def save_pretrain_checkpoint(
    target: Path,
    model: MaskedLM,
    tokenizer,
    config: dict[str, Any],
    state: TrainState,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    metrics: dict[str, Any] | None = None,
) -> None:
    """An HF BertForMaskedLM directory (+ resume state), written aside, sealed with its
    manifest and swapped in."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(str(tmp))
    write_json(tmp / CONFIG_FILE, config)
    write_json(tmp / "train_state.json", asdict(state))
    if metrics is not None:
        write_json(tmp / "metrics.json", metrics)
    if optimizer is not None:
        save_resume_state(tmp, optimizer, scheduler)
    seal_checkpoint(tmp, target)


def _load_weights(model: MaskedLM, path: Path) -> None:
    """Copy the weights of a saved MaskedLM directory into ``model`` in place (the optimizer
    holds its parameters)."""
    model.load_state_dict(MaskedLM.from_pretrained(path).state_dict())


# ---- the loop --------------------------------------------------------------------------------


def frozen_parameters(model: torch.nn.Module, globs: list[str]) -> list[torch.nn.Parameter]:
    """The parameters whose name matches one of ``globs`` (``train.freeze``), each once
    (a tied weight appears under one name)."""
    hits = [(n, p) for n, p in model.named_parameters() if any(fnmatchcase(n, g) for g in globs)]
    if not hits:
        raise ValueError(f"train.freeze {globs} matches no parameter of this model")
    log.info(
        "train.freeze: %d parameter tensors (%s ...) stay fixed for the first train.freeze_steps"
        " steps",
        len(hits),
        ", ".join(n for n, _ in hits[:3]),
    )
    return [p for _, p in hits]


def epoch_batches(data: MLMDataset, cfg: PretrainConfig, epoch: int, world: int) -> list[list[int]]:
    """The batch order of one epoch: a function of (seed, epoch) only, so resume rebuilds it."""
    batches = length_grouped_batches(
        data.lengths, cfg.train.batch_size, seed=cfg.train.seed * 100_003 + epoch
    )
    usable = len(batches) - len(batches) % world  # every process gets the same number
    return batches[:usable]


def run(cfg: PretrainConfig, resume: bool = False, progress: bool = True) -> MLMEval | None:
    """Seed, build the model, read, annotate and tokenize the corpus, pre-train.

    Each call appends its provenance to ``<output_dir>/sessions.jsonl`` (command, commit,
    machine, start, wall seconds, the step reached): a run resumed over several sessions
    lists each of them."""
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
    record: dict[str, Any] = {
        "command": sys.argv,
        "resume": resume,
        "git": git_info(),
        "machine": machine_info(),
        "started_at": started,
    }
    validate(cfg)
    set_seed(cfg.train.seed)
    model, tokenizer = build_pretrain_model(cfg)
    added: dict[str, Any] = {}

    saved_words = Path(cfg.train.output_dir) / "np_vocab.json"

    def np_vocabulary(train_chunks: list[Chunk]) -> Any:
        # a resumed run takes the words its first session added: its checkpoint's embedding
        # rows are in that order, whatever a re-annotated corpus would give now
        nonlocal tokenizer
        words = json.loads(saved_words.read_text()) if resume and saved_words.exists() else None
        tokenizer, added["words"] = add_np_vocabulary(
            cfg, model, tokenizer, train_chunks, words=words
        )
        return tokenizer

    data = prepare_pretrain_data(
        cfg,
        tokenizer,
        entity_masks=attention_options(model.encoder).entity_bias,
        pos_tags=model.encoder.config.pos_vocab_size > 0,
        on_train_chunks=np_vocabulary if cfg.model.np_vocab else None,
    )
    if "words" in added:
        data.report["np_vocab_added"] = len(added["words"])
        if int(os.environ.get("RANK", "0")) == 0:
            write_json(saved_words, added["words"])
    result = None
    try:
        result = train(cfg, model, tokenizer, data, resume=resume, progress=progress)
    finally:
        out = Path(cfg.train.output_dir)
        state_file = out / "last" / "train_state.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        record |= {
            "wall_seconds": time.perf_counter() - t0,
            "global_step": state.get("global_step"),
            "finished": bool(state.get("finished")),
        }
        if out.is_dir() and int(os.environ.get("RANK", "0")) == 0:  # one line per session
            append_jsonl(out / "sessions.jsonl", record)
    return result


def train(
    cfg: PretrainConfig,
    model: MaskedLM,
    tokenizer,
    data: PretrainData,
    resume: bool = False,
    progress: bool = True,
) -> MLMEval | None:
    tc = cfg.train
    out = Path(tc.output_dir)
    accelerator, bf16 = start_accelerator(tc.bf16)
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    if not epoch_batches(data.train, cfg, 0, world):
        raise ValueError(
            f"the training split has {len(data.train)} windows: too few for one batch of "
            f"{tc.batch_size} per process"
        )
    total_steps = tc.max_steps
    optimizer = build_optimizer(model, tc.lr, None, tc.weight_decay, param_lr=tc.param_lr)
    scheduler = linear_warmup_decay(optimizer, int(tc.warmup_ratio * total_steps), total_steps)

    last_dir, final_dir = out / "last", out / "final"
    state = resume_from(
        last_dir,
        resume,
        lambda path: _load_weights(model, path),
        optimizer,
        scheduler,
        cfg.to_dict(),
        CONFIG_FILE,
    )
    if state.finished:
        log.info("run already finished: %s", final_dir)
        return None
    frozen = frozen_parameters(model, tc.freeze) if tc.freeze_steps else []
    model, optimizer = accelerator.prepare(model, optimizer)
    raw_model: MaskedLM = accelerator.unwrap_model(model)
    config = cfg.to_dict()
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "config.json", config)
        write_json(out / "data_report.json", data.report)
    log_path = out / "metrics.jsonl"
    if accelerator.is_main_process:
        start_log(log_path, state.global_step)

    def evaluate() -> MLMEval | None:
        if not accelerator.is_main_process or not len(data.heldout):
            return None
        result = evaluate_mlm(raw_model, data.heldout, tc.eval_batch_size, device, bf16)
        entry = {"step": state.global_step, "epoch": state.epoch, "eval": result.metrics}
        append_jsonl(log_path, entry)
        bar.note(
            f"step {state.global_step}: held-out MLM loss {result.loss:.4f}, "
            f"accuracy {result.accuracy:.4f}"
        )
        return result

    def save(target: Path, metrics: dict[str, Any] | None = None, resumable: bool = True) -> None:
        if accelerator.is_main_process:
            opt, sched = (optimizer, scheduler) if resumable else (None, None)
            save_pretrain_checkpoint(
                target, raw_model, tokenizer, config, state, opt, sched, metrics
            )
        accelerator.wait_for_everyone()

    stop = StopFlag()
    old_handlers = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    bar = Progress(total_steps, enabled=progress and accelerator.is_main_process)
    result: MLMEval | None = None
    try:
        model.train()
        bar.advance(state.global_step)
        if state.global_step == 0 and state.batch_in_epoch == 0 and total_steps > 0:
            evaluate()  # the starting point (a converted encoder scores as its source)
        while not state.finished:
            batches = epoch_batches(data.train, cfg, state.epoch, world)[rank::world]
            t0, seen, tokens = time.perf_counter(), 0, 0
            while state.batch_in_epoch < len(batches) and state.global_step < total_steps:
                group = batches[state.batch_in_epoch : state.batch_in_epoch + tc.grad_accum]
                loss_sum, rows, n_tokens = accumulate_step(
                    accelerator,
                    model,
                    optimizer,
                    scheduler,
                    [data.train.batch(idx, state.epoch).to(device) for idx in group],
                    lambda i, batch: _forward(model, raw_model, batch).loss,
                    tc.max_grad_norm,
                    bf16,
                    frozen if state.global_step < tc.freeze_steps else (),
                )
                seen += rows
                tokens += n_tokens
                state.batch_in_epoch += len(group)
                state.global_step += 1
                elapsed = max(time.perf_counter() - t0, 1e-9)
                bar.update(loss_sum, seen * world / elapsed, state.epoch)
                step = state.global_step
                if accelerator.is_main_process and step % tc.log_every_steps == 0:
                    append_jsonl(
                        log_path,
                        {
                            "step": step,
                            "epoch": state.epoch,
                            "loss": loss_sum,
                            "lr": scheduler.get_last_lr()[0],
                            "windows_per_s": seen * world / elapsed,
                            "tokens_per_s": tokens * world / elapsed,
                        },
                    )
                if tc.eval_every_steps and step % tc.eval_every_steps == 0 and step < total_steps:
                    evaluate()
                    model.train()
                if tc.save_every_steps and step % tc.save_every_steps == 0 and step < total_steps:
                    save(last_dir)
                if stop.synced(device):
                    break
            if state.batch_in_epoch >= len(batches):
                state.epoch += 1
                state.batch_in_epoch = 0
            if state.global_step >= total_steps:
                result = evaluate()
                state.finished = True
                metrics = result.metrics if result is not None else None
                save(final_dir, metrics, resumable=False)
                save(last_dir, metrics)
            elif stop.stop:
                break
        if stop.stop and not state.finished:
            save(last_dir)
            log.warning("stopped at step %d; continue with --resume", state.global_step)
    finally:
        bar.close()
        for s, h in old_handlers.items():
            signal.signal(s, h)
    accelerator.wait_for_everyone()
    if result is None and state.finished and (final_dir / "metrics.json").exists():
        log.info("final held-out MLM: %s", json.loads((final_dir / "metrics.json").read_text()))
    return result


__all__ = [
    "MLMEval",
    "build_pretrain_model",
    "epoch_batches",
    "evaluate_mlm",
    "run",
    "save_pretrain_checkpoint",
    "train",
]
