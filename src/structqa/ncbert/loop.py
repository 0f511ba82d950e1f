"""GenBERT / NC-BERT on DROP: data, model building, prediction, and the training task.

Training runs on the shared scaffold (:mod:`structqa.training.trainer`: steps, bf16,
Accelerate, checkpoints, exact resume, SIGINT/SIGTERM); :class:`DropTask` supplies question
batches, GenBERT's loss and the DROP evaluation. DICE samples its number pairs from the
model's own generator; the task reseeds it from (seed, step, micro-batch, rank) before every
forward pass, so resume needs no extra state.

At each epoch end (and when ``max_steps`` is reached; also every ``eval_every_steps`` within an
epoch when set) the eval file is predicted and scored with the official DROP metric
(:func:`~structqa.metrics.drop.drop_score`); the best ``global_f1`` is kept in ``best/``.
When training is over, ``best/`` answers the test file: ``best/test/predictions.json`` (query
id -> answer string, what ``structqa score`` reads) and ``best/test/metrics.json``.

Two-stage training: ``model.init`` names a checkpoint of an earlier run (GenBERT trained on
``structqa synth`` data) to start from, with its tokenizer; modules it lacks (the NC layer) are
freshly initialized (:func:`warm_start`).

Checkpoints (``best/``, ``last/``): ``model.safetensors`` (GenBERT's state dict: the shared
decoder registers no module twice), ``structqa_config.json`` (the resolved
:class:`~structqa.ncbert.config.DropConfig`), ``encoder_config.json``, the tokenizer,
``train_state.json``, and in ``last/`` the resume state ``resume.pt``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed

from structqa.config import config_from_dict
from structqa.data.drop import DropAnswer, DropExample, read_drop
from structqa.data.squad import load_json
from structqa.encoders import attention_options, encoder_from_config_dict, load_encoder
from structqa.encoders.bert import BertEncoder
from structqa.features.batching import sorted_batches
from structqa.features.drop_features import (
    DropBatch,
    DropFeature,
    DropFeatureReport,
    collate_drop,
    featurize_drop_examples,
)
from structqa.io import read_json, read_safetensors, write_json
from structqa.manifest import MANIFEST, verify_manifest
from structqa.metrics.drop import GoldAnswer, drop_score, gold_from_drop_json
from structqa.models.build import (
    load_tokenizer,
    not_a_checkpoint,
    resolve_encoder_path,
    set_dropout,
)
from structqa.models.genbert import GenBERT
from structqa.ncbert.config import DropConfig, decode_cap_note, validate
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.runtime import autocast, use_bf16
from structqa.training.checkpoint import check_fresh_start, resumable
from structqa.training.trainer import CheckpointedTask, Env, Evaluation, Settings, fit

CONFIG_FILE = "structqa_config.json"  # the resolved DropConfig in a checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DropSplit:
    """Examples of one or more DROP files, their features (aligned) and the official gold."""

    examples: list[DropExample]
    features: list[DropFeature]
    gold: dict[str, list[GoldAnswer]]
    report: DropFeatureReport


@dataclass(frozen=True)
class DropData:
    train: DropSplit
    eval: DropSplit


# ---- data ------------------------------------------------------------------------------------


def resolve_drop_file(name: str, data_dir: str | None) -> Path:
    """A path that exists as given, else ``name`` under the data root."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    return resolve_data_file(name, resolve_data_dir(data_dir))


def read_split(paths: Sequence[str | Path], tokenizer, cfg: DropConfig) -> DropSplit:
    """Read DROP files (concatenated in order), featurize them, keep the official gold."""
    examples: list[DropExample] = []
    gold: dict[str, list[GoldAnswer]] = {}
    for path in paths:
        examples.extend(read_drop(path).examples)
        try:  # (read_drop has checked the file; plain or .gz, as it reads them)
            answers = gold_from_drop_json(load_json(Path(path)))
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        again = sorted(set(gold) & set(answers))
        if again:  # the later file's answers would replace the earlier's unseen
            raise ValueError(
                f"{path}: {len(again)} query ids already in an earlier file of the split "
                f"(first: {again[0]!r}); give each question once"
            )
        gold.update(answers)
    features, report = featurize(examples, tokenizer, cfg)
    return DropSplit(examples, features, gold, report)


def featurize(
    examples: Sequence[DropExample], tokenizer, cfg: DropConfig, annotate: bool = False
) -> tuple[list[DropFeature], Any]:
    """drop-train's features of ``examples``, with spaCy entity/sentence tables (through
    ``data.spacy_model`` and the ``data.annotation_cache``) when the model's mask needs them
    or ``annotate`` asks for them anyway."""
    annotations = None
    if annotate or cfg.model.needs_annotations:
        from structqa.text.annotate import Annotator

        annotator = Annotator(cfg.data.spacy_model, cfg.data.annotation_cache)
        flat = annotator.annotate([t for ex in examples for t in (ex.question, ex.passage)])
        annotations = list(zip(flat[0::2], flat[1::2], strict=True))
    return featurize_drop_examples(
        examples, tokenizer, cfg.data.features(cfg.model.lsdf), annotations
    )


def prepare_data(cfg: DropConfig, tokenizer) -> DropData:
    d = cfg.data
    train_files = [resolve_drop_file(name, d.dir) for name in d.train]
    train = read_split(train_files, tokenizer, cfg)
    log.info("train (%s): %s", ", ".join(map(str, train_files)), train.report.summary())
    evaluation = read_split([resolve_drop_file(d.eval, d.dir)], tokenizer, cfg)
    log.info("eval (%s): %s", d.eval, evaluation.report.summary())
    return DropData(train, evaluation)


# ---- model -----------------------------------------------------------------------------------


def drop_ready(encoder: BertEncoder, path: str | Path) -> BertEncoder:
    """``encoder`` if GenBERT can feed it: any stacking (SA/NAA) and relative-position
    attention work; POS-tag inputs and entity-aware attention need per-token tags that the
    DROP features do not carry yet, so they are refused here rather than failing mid-run.
    The decoder reuses the encoder's sub-layers under its causal mask: an NAA sub-layer
    there attends to the earlier positions alone (the first, none: its residual alone goes
    on), which neither GenBERT nor ANNA describes; said in the log."""
    if encoder.config.pos_vocab_size or attention_options(encoder).entity_bias:
        raise ValueError(
            f"{path}: this encoder takes POS-tag inputs or entity-aware attention, which "
            "drop-train does not feed yet; pre-train without them for DROP"
        )
    if "naa" in encoder.config.block:
        log.warning(
            "%s: the encoder has a neighbor-aware (NAA) sub-layer; GenBERT's decoder reuses "
            "it under its causal mask, where each position attends to the earlier ones alone "
            "(the first to none): a combination neither paper describes",
            path,
        )
    return encoder


def build_genbert(cfg: DropConfig, resume: bool = False) -> tuple[GenBERT, Any]:
    """The pretrained encoder with GenBERT's new modules (seeded by ``train.seed``), or, with
    ``model.init``, the weights and tokenizer of that drop-train checkpoint. A resume with a
    saved ``last/`` builds from it (its weights are restored next), so the encoder or the
    ``model.init`` checkpoint the run started from need not be there any more."""
    last = Path(cfg.train.output_dir) / "last"
    if (
        resume
        and resumable(last)  # what the trainer restores next (a swap cut short mended first)
        and all((last / name).is_file() for name in _CHECKPOINT_FILES)
    ):
        encoder = encoder_from_config_dict(read_json(last / "encoder_config.json"))
        return _seeded_genbert(encoder, cfg), load_tokenizer(last)
    if cfg.model.init is not None:
        return init_genbert(cfg)
    path = resolve_encoder_path(cfg.model.encoder)
    return _seeded_genbert(drop_ready(load_encoder(path), path), cfg), load_tokenizer(path)


def _seeded_genbert(encoder: BertEncoder, cfg: DropConfig) -> GenBERT:
    """GenBERT over ``encoder``, its new modules drawn from ``train.seed`` apart from the
    global random stream (a fresh build and a resume draw alike), with the config's dropout."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed)
        model = GenBERT(encoder, cfg.model.genbert(cfg.train.seed))
    set_dropout(model, cfg.model.dropout, None)
    return model


_CHECKPOINT_FILES = ("model.safetensors", CONFIG_FILE, "encoder_config.json")


def init_genbert(cfg: DropConfig) -> tuple[GenBERT, Any]:
    """GenBERT of ``cfg.model`` started from the checkpoint ``cfg.model.init`` (two-stage
    training: synthetic pre-training, then DROP fine-tuning). The encoder's architecture and
    the tokenizer are the checkpoint's (``model.encoder`` is not read); modules the checkpoint
    lacks are initialized as :func:`build_genbert` would (seeded by ``train.seed``)."""

    path = Path(str(cfg.model.init)).expanduser()
    lacking = [name for name in _CHECKPOINT_FILES if not (path / name).is_file()]
    if lacking:
        what = "does not exist" if not path.exists() else f"has no {', '.join(lacking)}"
        raise FileNotFoundError(
            f"model.init {str(cfg.model.init)!r}: {what}; expected a drop-train checkpoint "
            "directory such as runs/ncbert/pretrain-synthetic/best"
        )
    verify_manifest(path)
    # (its weights come from the checkpoint)
    model = _seeded_genbert(encoder_from_config_dict(read_json(path / "encoder_config.json")), cfg)
    warm_start(model, read_safetensors(path / "model.safetensors"), str(path))
    return model, load_tokenizer(path)


def warm_start(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> list[str]:
    """Copy a saved state dict into ``model``; returns the model's tensors it lacked.

    Those keep their fresh initialization (logged, grouped by module): e.g. the NC layer when
    NC-BERT starts from a GenBERT trained without one. A tensor of the checkpoint that the
    model lacks, or one whose shape differs, is an error naming it: GenBERT has no buffers
    or derived tensors, so nothing of a checkpoint is safe to drop silently.
    """
    own = model.state_dict()
    mismatched = [
        f"{key} (checkpoint {tuple(value.shape)}, model {tuple(own[key].shape)})"
        for key, value in state.items()
        if key in own and own[key].shape != value.shape
    ]
    if mismatched:
        raise ValueError(
            f"{source}: {len(mismatched)} tensor(s) have another shape than in this model "
            f"(another encoder or vocabulary?): {'; '.join(mismatched[:5])}"
        )
    unexpected = sorted(set(state) - set(own))
    if unexpected:
        raise ValueError(
            f"{source}: the checkpoint has {len(unexpected)} tensor(s) this model lacks (modules "
            f"{', '.join(_modules(unexpected))}: does the config switch off a module the "
            f"checkpoint trained, e.g. model.nc_layer?): {', '.join(unexpected[:5])}"
        )
    missing = sorted(set(own) - set(state))
    model.load_state_dict(state, strict=False)
    if missing:
        log.info(
            "initialized %d tensor(s) not in %s freshly: %s",
            len(missing),
            source,
            ", ".join(_modules(missing)),
        )
    log.info("loaded %d tensor(s) from %s", len(state), source)
    return missing


def _modules(keys: Sequence[str]) -> list[str]:
    """The top-level modules of state-dict keys, in first-seen order."""
    return list(dict.fromkeys(key.split(".", 1)[0] for key in keys))


def load_genbert(path: str | Path) -> tuple[GenBERT, Any, DropConfig]:
    """Rebuild the exact GenBERT saved by :func:`train` (weights, config, tokenizer)."""
    path = Path(path)
    if not (path / "model.safetensors").exists() and not (path / MANIFEST).exists():
        raise FileNotFoundError(not_a_checkpoint(path))
    verify_manifest(path)
    cfg = validate(config_from_dict(read_json(path / CONFIG_FILE), cls=DropConfig))
    encoder = encoder_from_config_dict(read_json(path / "encoder_config.json"))
    model = GenBERT(encoder, cfg.model.genbert(cfg.train.seed))
    model.load_state_dict(read_safetensors(path / "model.safetensors"))
    model.eval()
    return model, load_tokenizer(path), cfg


# ---- prediction and evaluation ---------------------------------------------------------------


@torch.no_grad()
def predict_drop(
    model: GenBERT,
    examples: Sequence[DropExample],
    features: Sequence[DropFeature],
    tokenizer,
    batch_size: int,
    bf16: bool = False,
) -> dict[str, str | list[str]]:
    """Query id -> answer (a string, or a generated multi-span answer's list of spans) for
    every featurized question (longest batches first)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pad_id = int(tokenizer.pad_token_id or 0)
    preds: dict[str, str | list[str]] = {}
    capped = 0
    for idx in sorted_batches([len(f) for f in features], batch_size):
        batch = collate_drop(features, idx, pad_id).to(device)
        with autocast(device, bf16):
            answers = model.predict(batch, features, tokenizer)
        for row, answer in zip(idx, answers, strict=True):
            preds[examples[features[row].example_index].id] = answer.answer
            capped += answer.capped
    if capped:  # an LSDF number cut short loses its leading digits: a wrong number, silently
        log.warning(
            "%d of %d answers were generated without ending and cut at model.max_decode_len "
            "%d: they may be wrong (a number cut short, a span list cut off)",
            capped,
            len(preds),
            model.config.max_decode_len,
        )
    model.train(was_training)
    return preds


def evaluate_split(
    model: GenBERT, split: DropSplit, tokenizer, batch_size: int, bf16: bool = False
) -> tuple[dict[str, str | list[str]], dict[str, Any]]:
    """Predictions and the official DROP scores (questions the reader skipped score 0)."""
    preds = predict_drop(model, split.examples, split.features, tokenizer, batch_size, bf16)
    return preds, drop_score(split.gold, preds)


def _genbert_on_device(checkpoint: str | Path) -> tuple[GenBERT, Any, DropConfig, torch.device]:
    """A saved GenBERT on the GPU where there is one, else the CPU, and that device."""
    model, tokenizer, cfg = load_genbert(checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), tokenizer, cfg, device


def metrics_path(out: str | Path) -> Path:
    """Where ``drop-predict --out NAME.json`` writes its scores: ``NAME.metrics.json``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.metrics.json")


def predict_file(
    checkpoint: str | Path,
    drop_file: str | Path,
    out: str | Path,
    bf16: str = "auto",
    scores: str | Path | None = None,
) -> dict[str, Any]:
    """Answer every question of a DROP file with a checkpoint: writes ``out`` (query id ->
    answer) and its scores to ``scores`` (default beside it, :func:`metrics_path`); returns
    the metrics."""
    out = Path(out)
    scores = Path(scores) if scores is not None else metrics_path(out)
    if (out.parent / MANIFEST).is_file():  # a checkpoint's files are sealed by its manifest
        raise ValueError(
            f"--out {out}: inside {out.parent}, a saved directory whose files its {MANIFEST} "
            "records (its own predictions and metrics would be replaced); write elsewhere"
        )
    model, tokenizer, cfg, device = _genbert_on_device(checkpoint)
    split = read_split([drop_file], tokenizer, cfg)
    preds, metrics = evaluate_split(
        model, split, tokenizer, cfg.train.eval_batch_size, use_bf16(bf16, device)
    )
    write_json(out, preds)
    write_json(scores, metrics)
    log.info("wrote %d predictions to %s and their scores to %s", len(preds), out, scores)
    return metrics


def predict_questions(
    checkpoint: str | Path, pairs: Sequence[tuple[str, str]], bf16: str = "auto"
) -> list[str | list[str]]:
    """The checkpoint's answer to each (question, passage) pair, no gold answer needed: a
    string, or a generated multi-span answer's list of spans."""
    model, tokenizer, cfg, device = _genbert_on_device(checkpoint)
    examples = [
        DropExample(str(i), str(i), question, passage, DropAnswer())
        for i, (question, passage) in enumerate(pairs)
    ]
    features, _ = featurize(examples, tokenizer, cfg)
    preds = predict_drop(
        model, examples, features, tokenizer, cfg.train.eval_batch_size, use_bf16(bf16, device)
    )
    return [preds[str(i)] for i in range(len(pairs))]


# ---- the task --------------------------------------------------------------------------------


@dataclass
class DropTask(CheckpointedTask):
    """GenBERT / NC-BERT on DROP: question batches, GenBERT's loss (DICE pairs reseeded from
    (seed, step, micro-batch, rank), so resume needs no generator state), the official DROP
    scores of the eval file; ``best/`` keeps the highest ``global_f1``."""

    data: DropData
    seed: int
    eval_batch_size: int

    @property
    def lengths(self) -> list[int]:
        return [len(f) for f in self.data.train.features]

    def batch(self, indices: list[int], epoch: int) -> DropBatch:  # noqa: ARG002
        pad_id = int(self.tokenizer.pad_token_id or 0)
        return collate_drop(self.data.train.features, indices, pad_id)

    def loss(self, model, batch: DropBatch, env: Env, step: int, micro: int) -> torch.Tensor:
        raw_model: GenBERT = env.accelerator.unwrap_model(model)
        slot = ((self.seed * 1_000_003 + step) * 64 + micro) * 1024 + env.rank
        raw_model.dice_generator.manual_seed(slot % 2**64)  # a large train.seed wraps
        return model(batch).loss

    def evaluate(self, model: GenBERT, env: Env) -> Evaluation | None:
        if not env.is_main:
            return None
        _, metrics = evaluate_split(
            model, self.data.eval, self.tokenizer, self.eval_batch_size, env.bf16
        )
        note = f"EM {metrics['global_em']:.4f} F1 {metrics['global_f1']:.4f}"
        return Evaluation(metrics, note, score=metrics["global_f1"], saved=metrics, value=metrics)


def run(cfg: DropConfig, resume: bool = False, progress: bool = True) -> dict[str, Any] | None:
    """Seed, build the model, read and featurize the data, train, then answer the test file
    with ``best/``. Returns the best eval metrics of this stint (None if it trained none)."""
    validate(cfg)
    if not resume:  # before the model and the data: a second, not minutes
        check_fresh_start(Path(cfg.train.output_dir))
    if cfg.data.test:  # scored once training is over: read now, not after hours of it
        read_drop(resolve_drop_file(cfg.data.test, cfg.data.dir))
    if note := decode_cap_note(cfg):
        log.warning("%s", note)
    set_seed(cfg.train.seed)
    model, tokenizer = build_genbert(cfg, resume)
    data = prepare_data(cfg, tokenizer)
    best = train(cfg, model, tokenizer, data, resume=resume, progress=progress)
    out = Path(cfg.train.output_dir)
    state_file = out / "last" / "train_state.json"
    finished = state_file.exists() and json.loads(state_file.read_text())["finished"]
    if cfg.data.test and finished and (out / "best" / "model.safetensors").exists():
        test_dir = out / "best" / "test"
        if not (test_dir / "metrics.json").exists():
            test_file = resolve_drop_file(cfg.data.test, cfg.data.dir)
            metrics = predict_file(
                out / "best",
                test_file,
                test_dir / "predictions.json",
                cfg.train.bf16,
                scores=test_dir / "metrics.json",
            )
            log.info(
                "test (%s): EM %.4f F1 %.4f", test_file, metrics["global_em"], metrics["global_f1"]
            )
    return best


def train(
    cfg: DropConfig,
    model: GenBERT,
    tokenizer: Any,
    data: DropData,
    resume: bool = False,
    progress: bool = True,
) -> dict[str, Any] | None:
    """Train; the best eval metrics of this stint (None if it made none better)."""
    config = cfg.to_dict()
    task = DropTask(tokenizer, config, data, cfg.train.seed, cfg.train.eval_batch_size)
    settings = Settings.from_config(cfg.train, config, unit="questions")
    return fit(task, model, settings, resume, progress)


__all__ = [
    "DropData",
    "DropSplit",
    "DropTask",
    "build_genbert",
    "evaluate_split",
    "init_genbert",
    "load_genbert",
    "predict_drop",
    "predict_file",
    "prepare_data",
    "read_split",
    "resolve_drop_file",
    "run",
    "train",
    "warm_start",
]
