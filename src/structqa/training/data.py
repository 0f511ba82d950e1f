"""From a config to featurized training and evaluation data (reports logged on the way)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from structqa.config import Config
from structqa.data import parse_train_size, train_subset
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.features.squad import Feature, FeatureConfig, featurize, tag_annotator
from structqa.paths import resolve_data_dir, resolve_data_file

log = logging.getLogger(__name__)


@dataclass
class TrainData:
    train_examples: list[Example]
    train_features: list[Feature]
    eval_examples: list[Example]
    eval_features: list[Feature]
    version_2: bool


def data_path(cfg: Config, name: str) -> Path:
    """An absolute or existing relative path is used as is; otherwise it is under the data dir."""
    p = Path(name).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return resolve_data_file(name, resolve_data_dir(cfg.data.dir))


def load_eval_examples(cfg: Config, path: str | None = None) -> tuple[list[Example], bool]:
    ds = read_extractive(data_path(cfg, path or cfg.data.eval))
    examples = list(ds.examples)
    if cfg.data.eval_size is not None:
        examples = examples[: cfg.data.eval_size]
    v2 = cfg.decode.version_2
    if v2 is None:
        v2 = any(ex.is_impossible for ex in examples)
    return examples, v2


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


def prepare_data(cfg: Config, tokenizer) -> TrainData:
    train_ds = read_extractive(data_path(cfg, cfg.data.train))  # the reader logs its report
    train = list(
        train_subset(train_ds.examples, parse_train_size(cfg.data.train_size), cfg.train.seed)
    )
    eval_examples, v2 = load_eval_examples(cfg)
    fc = feature_config(cfg)
    annotator = tag_annotator(fc)  # one spaCy pipeline and parse cache for both splits
    train_feats, rep = featurize(train, tokenizer, fc, training=True, annotator=annotator)
    log.info("train: %s", rep.summary())
    eval_feats, rep = featurize(eval_examples, tokenizer, fc, annotator=annotator)
    log.info("eval: %s", rep.summary())
    return TrainData(train, train_feats, eval_examples, eval_feats, v2)
