"""From a config to featurized training, validation and test data (reports logged on the way).

Three files, three jobs: ``data.train`` trains; ``data.validation`` (a fraction of the training
file split off by context, or a file of its own) chooses ``best/``; ``data.eval``, the test
file, is read only after training, to score ``best/`` once. With ``data.validation: none``
the choice is made on ``data.eval`` itself (how the experiment grids were run).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from structqa.config import Config, validation_fraction
from structqa.data import parse_train_size, train_subset, validation_split
from structqa.data.overlap import drop_overlap, passage_key
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.features.squad import Feature, FeatureConfig, featurize, tag_annotator
from structqa.paths import resolve_data_dir, resolve_data_file

log = logging.getLogger(__name__)


@dataclass
class TrainData:
    """What the training loop needs. ``eval_examples``/``eval_features`` are the questions
    that choose best/: the validation set (``selection`` says which file or slice)."""

    train_examples: list[Example]
    train_features: list[Feature]
    eval_examples: list[Example]
    eval_features: list[Feature]
    version_2: bool
    selection: str = ""


def data_path(cfg: Config, name: str) -> Path:
    """An absolute or existing relative path is used as is; otherwise it is under the data dir."""
    p = Path(name).expanduser()
    if p.is_absolute() or p.exists():
        return p
    try:
        return resolve_data_file(name, resolve_data_dir(cfg.data.dir))
    except FileNotFoundError as err:  # name the file first: a mistyped path is the usual cause
        raise FileNotFoundError(
            f"{name}: no such file in {Path.cwd()}, and not in the data directory ({err}); "
            "check the path"
        ) from None


def _version_2(cfg: Config, *groups: Sequence[Example]) -> bool:
    v2 = cfg.decode.version_2
    return any(ex.is_impossible for g in groups for ex in g) if v2 is None else v2


def selection_version_2(cfg: Config, pool: Sequence[Example], val: Sequence[Example]) -> bool:
    """Whether the questions that choose best/ are scored as SQuAD 2.0: when the data has
    unanswerable questions anywhere, the training pool (unless ``data.answerable_only``) or
    the validation questions, not only when the validation slice happened to draw some (a
    slice without any would choose best/ by v1.1 scores and fit no no-answer threshold)."""
    trained = () if cfg.data.answerable_only else pool
    v2 = _version_2(cfg, trained, val)
    if v2 and cfg.decode.version_2 is None and not _version_2(cfg, val):
        log.warning(
            "the %d validation questions hold no unanswerable question, but the training data "
            "does: scoring them as SQuAD 2.0 (the model may abstain); give "
            "--decode.version_2=false to score them as SQuAD 1.1",
            len(val),
        )
    return v2


def _scorable(cfg: Config, examples: Sequence[Example], path: Path, key: str) -> None:
    """Refuse, when the data is read, questions that ``decode.version_2: false`` cannot score:
    SQuAD 1.1 scoring needs a gold answer for every question (it failed after training)."""
    if cfg.decode.version_2 is not False:
        return
    impossible = [ex.id for ex in examples if ex.is_impossible]
    if impossible:
        raise ValueError(
            f"{key}: {path} holds {len(impossible)} unanswerable question(s) (e.g. id "
            f"{impossible[0]!r}), but decode.version_2=false scores it as SQuAD 1.1, which needs "
            "an answer for each: drop --decode.version_2=false (scored as SQuAD 2.0), or give "
            "a file of answerable questions"
        )


def _calibratable(cfg: Config, val: Sequence[Example], v2: bool, where: str) -> None:
    """Refuse, before training, validation questions the calibration fitted on them after
    training cannot use: fewer than two, or none unanswerable to weight to
    ``decode.unanswerable_share``."""
    if len(val) < 2:
        raise ValueError(
            f"data.validation ({where}): {len(val)} question; the calibration fitted on the "
            "validation questions after training needs at least two: give more"
        )
    share = cfg.decode.unanswerable_share
    unanswerable = sum(ex.is_impossible for ex in val)
    if v2 and share is not None and unanswerable in (0, len(val)):
        what = "no unanswerable question" if not unanswerable else "no answerable question"
        raise ValueError(
            f"data.validation ({where}): {what} among the {len(val)}, so the calibration "
            f"cannot weight them to decode.unanswerable_share={share}: give validation "
            "questions of both kinds, or drop the setting"
        )


def _nonempty(examples: Sequence[Example], path: Path, key: str) -> None:
    if not examples:
        raise ValueError(
            f"{key}: {path} holds no question (the reader's log above says what it read and "
            "skipped); give a file with at least one question"
        )


def _first(cfg: Config, examples: list[Example] | tuple[Example, ...]) -> list[Example]:
    size = cfg.data.eval_size
    return list(examples if size is None else examples[:size])


def load_eval_examples(cfg: Config, path: str | None = None) -> tuple[list[Example], bool]:
    """The test file (``path``, else ``data.eval``), cut to ``data.eval_size``, and whether it
    is scored as SQuAD 2.0."""
    name = path or cfg.data.eval
    if not name:
        raise ValueError("no test file: give --eval FILE (the config's data.eval is not set)")
    source = data_path(cfg, name)
    ds = read_extractive(source, dedupe_ids=cfg.data.dedupe_ids)
    key = "--eval" if path else "data.eval"
    _nonempty(ds.examples, source, key)
    examples = _first(cfg, ds.examples)
    _scorable(cfg, examples, source, key)
    return examples, _version_2(cfg, examples)


def split_training_file(cfg: Config) -> tuple[list[Example], list[Example] | None, str]:
    """``(training pool, validation examples, description)`` of ``cfg.data``.

    A validation fraction takes whole contexts of ``data.train`` (chosen by
    ``data.validation_seed``; no paragraph is on both sides), a validation file is read as
    it is, and ``none`` gives None: best/ is then chosen on ``data.eval``."""
    d = cfg.data
    source = data_path(cfg, d.train)
    pool = list(read_extractive(source, dedupe_ids=d.dedupe_ids).examples)
    _nonempty(pool, source, "data.train")
    if d.exclude:
        pool, report = drop_overlap(pool, [data_path(cfg, name) for name in d.exclude])
        log.info("data.exclude: %s: %s", source, report.summary())
        if not pool:
            raise ValueError(
                f"data.exclude: every question of {source} is on a passage of "
                f"{', '.join(d.exclude)}; nothing is left to train on"
            )
    fraction = validation_fraction(d.validation)
    if fraction is not None:
        try:
            train, val = validation_split(pool, fraction, d.validation_seed)
        except ValueError as err:
            raise ValueError(f"{source}: data.validation={d.validation}: {err}") from None
        where = (
            f"{len(val)} questions ({fraction:g}, by context, seed {d.validation_seed}) "
            f"split off {source}"
        )
        log.info("validation: %s; %d questions left to train on", where, len(train))
        _not_lopsided(val, train, fraction, source, d.validation)
        _scorable(cfg, val, source, f"data.validation={d.validation}")
        return list(train), _first(cfg, val), where
    if d.validation is None:
        return pool, None, ""
    path = data_path(cfg, d.validation)
    val = read_extractive(path, dedupe_ids=d.dedupe_ids).examples
    _nonempty(val, path, "data.validation")
    _scorable(cfg, val, path, "data.validation")
    return pool, _first(cfg, val), str(path)


def _not_lopsided(
    val: Sequence[Example], train: Sequence[Example], fraction: float, source: Path, given: str
) -> None:
    """Refuse a validation share that took more questions than it left to train on, and more
    than twice its fraction: passages go whole to one side, and a file of a few long documents
    can put most of its questions in the first passage drawn. A file of fewer than
    :data:`LOPSIDED_MIN` questions (a smoke test) is warned of, not refused."""
    total = len(val) + len(train)
    if not (len(val) > len(train) and len(val) > 2 * fraction * total):
        return
    text = (
        f"{source}: data.validation={given} took {len(val)} of its {total} questions (whole "
        f"passages go to one side, and those drawn hold most of them), leaving {len(train)} "
        "to train on: give a validation file of your own (--data.validation=FILE), another "
        "--data.validation_seed, or a file with its questions spread over more passages"
    )
    if total < LOPSIDED_MIN:
        log.warning("%s", text)
        return
    raise ValueError(text)


#: below this many questions a lopsided validation share is warned of, not refused
LOPSIDED_MIN = 20


def load_validation_examples(cfg: Config) -> tuple[list[Example], bool]:
    """The questions that choose best/ for ``cfg`` (the validation slice or file; with
    ``data.validation: none``, data.eval), exactly as training selected on them, and whether
    they are scored as SQuAD 2.0. For work after training that must not see the test file,
    e.g. fitting a no-answer threshold."""
    pool, val, _ = split_training_file(cfg)
    if val is None:
        return load_eval_examples(cfg)
    return val, selection_version_2(cfg, pool, val)


def subsample_negative_windows(
    features: list[Feature], examples: list[Example], rate: float, seed: int
) -> list[Feature]:
    """``features`` less a seeded ``1 - rate`` share of the windows of answerable questions
    that do not hold the answer (a long document gives one question dozens of them); the
    answer's window and every window of an unanswerable question stay."""
    rng = random.Random(f"negative-windows-{seed}")
    kept = []
    for f in features:
        negative = f.start_position == 0 and not examples[f.example_index].is_impossible
        if not negative or rng.random() < rate:
            kept.append(f)
    return kept


def feature_config(cfg: Config) -> FeatureConfig:
    """Windows and token tags of ``cfg.data`` (its token_tags resolved: ``build_model``)."""
    d = cfg.data
    return FeatureConfig(
        d.max_seq_len,
        d.doc_stride,
        d.max_query_len,
        token_tags=tuple(d.token_tags or ()),
        spacy_model=d.spacy_model,
        annotation_cache=d.annotation_cache,
    )


def drawn_training(
    cfg: Config,
) -> tuple[list[Example], list[Example], list[Example] | None, str]:
    """``(training pool, questions trained on, validation examples, description)``: the
    training file split
    (:func:`split_training_file`), its ``data.train_size`` drawn, ``data.answerable_only``
    applied; what a run of ``cfg`` trains on, read again by ``structqa calibrate`` to warn of
    a file about the same passages."""
    pool, val, selection = split_training_file(cfg)  # the readers log their reports
    try:
        train = list(train_subset(pool, parse_train_size(cfg.data.train_size), cfg.train.seed))
    except ValueError as err:
        left = f" (after data.validation took {len(val)})" if val is not None else ""
        raise ValueError(f"data.train_size: {err}{left}") from None
    if cfg.data.answerable_only:
        kept = [ex for ex in train if not ex.is_impossible]
        log.info(
            "data.answerable_only: training on %d answerable of the %d questions drawn",
            len(kept),
            len(train),
        )
        if not kept:
            raise ValueError(
                f"data.answerable_only: none of the {len(train)} training questions drawn from "
                f"{cfg.data.train} has an answer"
            )
        train = kept
    return pool, train, val, selection


def warn_trained_on(
    examples: Sequence[Example],
    trained: set[str],
    what: str,
    remedy: str = "give files apart, or data.exclude=[FILE] to drop those passages from training",
) -> None:
    """Warn where ``examples`` ask about passages the run trains on: its scores then measure
    memory, not reading (a file given as both data.train and data.validation or data.eval)."""
    shared = sum(passage_key(ex.context) in trained for ex in examples)
    if shared:
        log.warning(
            "%s: %d of %d questions ask about passages the run trains on, so their scores "
            "overstate it; %s",
            what,
            shared,
            len(examples),
            remedy,
        )


def prepare_data(cfg: Config, tokenizer) -> TrainData:
    """Training features and the features that choose best/. The test file (data.eval) is
    only parsed here (a malformed record fails before training; questions about passages the
    run trains on are warned of), unless ``data.validation`` is none: then it chooses best/."""
    pool, train, val, selection = drawn_training(cfg)
    if len(train) < len(pool) and not cfg.data.answerable_only:  # (the quickstart's 512 too)
        log.info(
            "data.train_size %s: training on %d of the %d questions left to train on (drawn "
            "by train.seed %d); --data.train_size=all trains on every one",
            cfg.data.train_size,
            len(train),
            len(pool),
            cfg.train.seed,
        )
    trained = {passage_key(ex.context) for ex in train}
    if val is None:  # the test file chooses best/: scored as the test file is scored
        val, v2 = load_eval_examples(cfg)
        selection = str(data_path(cfg, str(cfg.data.eval)))
        log.info("data.validation is none: best/ is chosen on data.eval (%s)", selection)
        warn_trained_on(val, trained, "data.eval, which chooses best/,")
    else:
        v2 = selection_version_2(cfg, pool, val)
        _calibratable(cfg, val, v2, selection)
        warn_trained_on(val, trained, "the validation questions")
        if cfg.data.eval:  # fail now, not after training, if the test file is missing
            test = data_path(cfg, cfg.data.eval)
            if not test.is_file():
                raise FileNotFoundError(f"data.eval: test file {test} does not exist")
            if validation_fraction(cfg.data.validation) is None and (
                data_path(cfg, str(cfg.data.validation)).resolve() == test.resolve()
            ):
                raise ValueError(
                    f"data.validation and data.eval are the same file ({test}): best/ would be "
                    "chosen and calibrated on the test questions, then scored on them; give a "
                    "validation file about other passages, or a share of data.train "
                    "(--data.validation=0.1)"
                )
            # ... or not readable (a malformed record); read, not featurized
            warn_trained_on(load_eval_examples(cfg)[0], trained, "data.eval, the test file,")
    fc = feature_config(cfg)
    annotator = tag_annotator(fc)  # one spaCy pipeline and parse cache for both splits
    train_feats, rep = featurize(train, tokenizer, fc, training=True, annotator=annotator)
    log.info("train: %s", rep.summary())
    if cfg.data.negative_window_rate < 1.0:
        before = len(train_feats)
        train_feats = subsample_negative_windows(
            train_feats, train, cfg.data.negative_window_rate, cfg.train.seed
        )
        log.info(
            "data.negative_window_rate %g: kept %d of %d training windows",
            cfg.data.negative_window_rate,
            len(train_feats),
            before,
        )
    eval_feats, rep = featurize(val, tokenizer, fc, annotator=annotator)
    log.info("validation: %s", rep.summary())
    return TrainData(train, train_feats, val, eval_feats, v2, selection)
