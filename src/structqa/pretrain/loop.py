"""Masked-LM pre-training (continued, or from scratch) on the shared training scaffold.

The task's own parts (:class:`MLMTask`): windows masked as a function of (seed, window id,
epoch) only, the MLM loss, and the held-out MLM loss and accuracy (on the masked positions),
measured at step 0, every ``eval_every_steps`` and at the end. Steps, bf16, Accelerate,
checkpoints, exact resume and SIGINT/SIGTERM are the scaffold's (:mod:`structqa.training.trainer`).
The encoder may stay frozen for the first ``train.freeze_steps`` steps (``train.freeze``).

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
import sys
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import partial
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
from structqa.features.batching import sorted_batches
from structqa.io import append_jsonl, write_json
from structqa.models.build import load_tokenizer, resolve_encoder_path, set_dropout
from structqa.pretrain.config import SCRATCH, PretrainConfig, validate
from structqa.pretrain.data import Chunk, MLMBatch, MLMDataset, PretrainData, prepare_pretrain_data
from structqa.pretrain.masking import IGNORE_INDEX
from structqa.pretrain.mlm_head import MaskedLM, ensure_mlm_head
from structqa.pretrain.np_tokenizer import collect_np_words, extend_embeddings, extend_tokenizer
from structqa.provenance import git_info, machine_info
from structqa.runtime import autocast
from structqa.text.annotate import NUM_POS_IDS
from structqa.training.checkpoint import save_checkpoint
from structqa.training.trainer import CheckpointedTask, Env, Evaluation, Settings, fit

__all__ = [
    "MLMEval",
    "MLMTask",
    "build_pretrain_model",
    "evaluate_mlm",
    "run",
    "save_pretrain_checkpoint",
    "train",
]

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
    the collection (a resumed run passes the ones its first stint added)."""
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
        if not len(gold):  # nothing masked in this batch: nothing to score
            continue
        loss_sum += float(out.loss) * len(gold)  # the mean over them, back to a sum
        correct += int((picked.argmax(-1) == gold).sum())
        count += len(gold)
    model.train(was_training)
    n = max(count, 1)
    return MLMEval(loss_sum / n, correct / n, count, len(data))


# ---- checkpoints -----------------------------------------------------------------------------


def _save_pretrained(model: MaskedLM, directory: Path) -> None:
    model.save_pretrained(directory)


# an HF BertForMaskedLM directory (+ resume state), by the one checkpoint writer
save_pretrain_checkpoint = partial(
    save_checkpoint, write_model=_save_pretrained, config_file=CONFIG_FILE
)


def _load_weights(model: MaskedLM, path: Path) -> None:
    """Copy the weights of a saved MaskedLM directory into ``model`` in place (the optimizer
    holds its parameters)."""
    model.load_state_dict(MaskedLM.from_pretrained(path).state_dict())


# ---- the task ----------------------------------------------------------------------------------


@dataclass
class MLMTask(CheckpointedTask):
    """Masked-LM pre-training on the shared scaffold: batches masked per (seed, window,
    epoch), the MLM loss, the held-out MLM loss and accuracy; HF BertForMaskedLM checkpoints."""

    data: PretrainData
    eval_batch_size: int
    write = staticmethod(save_pretrain_checkpoint)  # HF BertForMaskedLM directories

    @property
    def lengths(self) -> list[int]:
        return self.data.train.lengths

    def batch(self, indices: list[int], epoch: int) -> MLMBatch:
        return self.data.train.batch(indices, epoch)

    def loss(self, model, batch: MLMBatch, env: Env, step: int, micro: int) -> torch.Tensor:  # noqa: ARG002
        return _forward(model, env.accelerator.unwrap_model(model), batch).loss

    def evaluate(self, model: MaskedLM, env: Env) -> Evaluation | None:
        if not env.is_main or not len(self.data.heldout):
            return None
        result = evaluate_mlm(model, self.data.heldout, self.eval_batch_size, env.device, env.bf16)
        note = f"held-out MLM loss {result.loss:.4f}, accuracy {result.accuracy:.4f}"
        return Evaluation(result.metrics, note, saved=result.metrics, value=result)

    def load(self, model: MaskedLM, path: Path) -> None:
        _load_weights(model, path)


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


def run(cfg: PretrainConfig, resume: bool = False, progress: bool = True) -> MLMEval | None:
    """Seed, build the model, read, annotate and tokenize the corpus, pre-train.

    Each call appends its provenance to ``<output_dir>/sessions.jsonl`` (command, commit,
    machine, start, wall seconds, the step reached): a run resumed over several stints
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
        # a resumed run takes the words its first stint added: its checkpoint's embedding
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
        if out.is_dir() and int(os.environ.get("RANK", "0")) == 0:  # one line per stint
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
    """Pre-train; the final held-out evaluation (None if the run did not finish now)."""
    tc = cfg.train
    config = cfg.to_dict()
    settings = Settings.from_config(
        tc,
        config,
        frozen=frozen_parameters(model, tc.freeze) if tc.freeze_steps else (),
        eval_every_epoch=False,
        eval_at_start=True,
        final_dir="final",
        unit="windows",
        config_file=CONFIG_FILE,
        reports={"data_report.json": data.report},
    )
    task = MLMTask(tokenizer, config, data, tc.eval_batch_size)
    return fit(task, model, settings, resume, progress)
