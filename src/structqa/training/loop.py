"""Extractive QA training: the span task on the shared scaffold (:mod:`structqa.training.trainer`).

The task's own parts: batches of featurized windows (:func:`collate`), the span head's loss,
and the evaluation on the data that chooses ``best/`` (every process scores a shard of the
windows; the main process merges them and computes EM/F1, and for SQuAD 2.0 the tuned no-answer
threshold). ``best/`` keeps the highest F1 (best F1 over thresholds for SQuAD 2.0) with its
predictions, n-best and null odds; ``last/`` is resumable and carries the metrics (and
threshold) of the weights it holds when they were just evaluated, so that a model loaded from
it can abstain too.
Evaluation runs at epoch ends (``train.eval_every_epoch``) and when the step budget is spent.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate.utils import gather_object, set_seed

from structqa.config import Config, validate
from structqa.decoding import DecodeConfig
from structqa.evaluation import EvalResult, score_collector, write_outputs
from structqa.features.batching import Batch, collate
from structqa.features.squad import Feature
from structqa.inference import run_inference
from structqa.io import write_json
from structqa.models.build import build_model, describe_start
from structqa.models.extractive import ExtractiveQAModel
from structqa.provenance import INIT_RECORD
from structqa.training.checkpoint import check_fresh_start
from structqa.training.data import TrainData, prepare_data
from structqa.training.heldout import Calibrate, score_best_once
from structqa.training.trainer import (
    CheckpointedTask,
    Env,
    Evaluation,
    Settings,
    StopFlag,
    epoch_order,
    fit,
)

log = logging.getLogger(__name__)


@dataclass
class SpanTask(CheckpointedTask):
    """Extractive QA over featurized windows (see the module docstring)."""

    data: TrainData
    decode: DecodeConfig
    eval_batch_size: int

    @property
    def lengths(self) -> list[int]:
        return [len(f) for f in self.data.train_features]

    def data_digest(self) -> str:
        """The training windows' tokens, segments and answer positions, in order (what a
        resume checks it continues on)."""
        h = hashlib.sha256()
        for f in self.data.train_features:
            h.update(f.input_ids.tobytes() + f.token_type_ids.tobytes())
            h.update(f"{f.start_position},{f.end_position};".encode())
        return h.hexdigest()[:16]

    def choice_digest(self) -> str:
        """The questions that choose best/: ids, texts and gold answers, in order."""
        h = hashlib.sha256()
        for ex in self.data.eval_examples:
            fields = (ex.id, ex.question, ex.context, *ex.gold_texts, str(ex.is_impossible))
            h.update(json.dumps(fields).encode())
        return h.hexdigest()[:16]

    def batch(self, indices: list[int], epoch: int) -> Batch:  # noqa: ARG002
        return collate(self.data.train_features, indices)

    def loss(self, model, batch: Batch, env: Env, step: int, micro: int) -> torch.Tensor:  # noqa: ARG002
        return model(batch).loss

    def evaluate(self, model, env: Env) -> Evaluation | None:
        # every process scores a shard of the windows; the main one merges and scores
        d = self.data
        collector = run_inference(
            model,
            d.eval_features,
            self.decode,
            self.eval_batch_size,
            env.bf16,
            device=env.device,
            shard=(env.rank, env.world),
        )
        if env.world > 1:
            shards = gather_object([collector])
            collector = shards[0].merge(shards[1:])
        if not env.is_main:
            return None
        result = score_collector(collector, d.eval_examples, d.eval_features, d.version_2)
        return Evaluation(
            result.metrics,
            f"F1 {result.f1:.2f}",
            score=result.f1,
            saved=result.metrics_with_threshold(),
            value=result,
            outputs=lambda directory: write_outputs(result, directory),
        )


def epoch_batches(features: list[Feature], cfg: Config, epoch: int, world: int) -> list[list[int]]:
    """The batch order of one epoch: a function of (seed, epoch) only, so resume can rebuild it."""
    lengths = [len(f) for f in features]
    return epoch_order(lengths, cfg.train.batch_size, cfg.train.seed, epoch, world)


def run(
    cfg: Config,
    resume: bool = False,
    progress: bool = True,
    calibrate: Calibrate | None = None,
) -> EvalResult | None:
    """Check the config, seed, build the model, read and featurize the data, train; then
    score best/ once on the test file (data.eval) when best/ was chosen on validation data
    (that result is returned; else best/'s on the data that chose it), at the null threshold
    of the calibration ``calibrate`` fits on that validation data first (without it, the one
    predict answers at: best/'s last evaluation's, or none for a run chosen on answerable
    questions; :func:`structqa.evaluation.scoring_threshold`)."""
    validate(cfg)
    if not resume:  # before the model, the data or the start's record: a second, not minutes
        check_fresh_start(Path(cfg.train.output_dir))
    model, tokenizer = build_seeded(cfg)
    record_start(cfg, resume)
    data = prepare_data(cfg, tokenizer)
    best = train(cfg, model, tokenizer, data, resume=resume, progress=progress)
    return score_best_once(cfg, best, calibrate)


def build_seeded(cfg: Config) -> tuple[ExtractiveQAModel, object]:
    """The model and tokenizer, its new layers drawn by ``train.init_seed`` (else
    ``train.seed``); every random draw after the build (dropout, the subset) follows
    ``train.seed``. Runs that share ``init_seed`` start from the same weights, which is what
    averaging their weights afterwards (``structqa soup``) needs."""
    init_seed = cfg.train.seed if cfg.train.init_seed is None else cfg.train.init_seed
    set_seed(init_seed)
    built = build_model(cfg)
    if init_seed != cfg.train.seed:
        set_seed(cfg.train.seed)
    return built


def record_start(cfg: Config, resume: bool) -> None:
    """Write ``<output_dir>/init_from.json``: which checkpoint ``model.init_from`` named when
    the run started (a resumed run keeps the record of its start; its weights come from
    last/)."""
    if not cfg.model.init_from:
        return
    target = Path(cfg.train.output_dir) / INIT_RECORD
    if resume and target.is_file():
        return
    write_json(target, describe_start(cfg.model.init_from))


def train(
    cfg: Config, model, tokenizer, data: TrainData, resume: bool = False, progress: bool = True
) -> EvalResult | None:
    """Train; the best evaluation of this stint (None if it made none better)."""
    config = cfg.to_dict()
    decode = DecodeConfig.from_settings(cfg.decode)
    task = SpanTask(tokenizer, config, data, decode, cfg.train.eval_batch_size)
    return fit(task, model, Settings.from_config(cfg.train, config), resume, progress)


__all__ = [
    "INIT_RECORD",
    "SpanTask",
    "StopFlag",
    "build_seeded",
    "epoch_batches",
    "record_start",
    "run",
    "train",
]
