"""Parse, once, every text that fine-tuning with token tags will annotate, into a cache file.

For a machine without spaCy (e.g. a GPU box that cannot install it): run this where spaCy is,
carry the cache, and point ``data.annotation_cache`` at it. An ``Annotator`` reading the cache
then never loads spaCy; a text missing from it still needs spaCy, so a gap fails loudly.

    python scripts/warm_annotations.py configs/anna/gpu.yaml --out runs/anna/annotations.jsonl

It featurizes, with the config's tokenizer and windows, the training subset of every seed in
the config's grid and the whole evaluation split, exactly as ``structqa train`` does, with both
token tags on (the parse of a text does not depend on which tags are read from it).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from structqa.data import parse_train_size, train_subset
from structqa.data.readers import read_extractive
from structqa.experiments.grid import load_experiment
from structqa.features.squad import TOKEN_TAGS, featurize
from structqa.text.annotate import Annotator
from structqa.training.data import data_path, feature_config, load_eval_examples

log = logging.getLogger("warm_annotations")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", help="experiment YAML")
    p.add_argument("--out", required=True, help="annotation cache (JSONL, appended to)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from transformers import AutoTokenizer

    from structqa.paths import default_encoder_path

    experiment = load_experiment(Path(args.config))
    annotator: Annotator | None = None
    tokenizer = AutoTokenizer.from_pretrained(str(default_encoder_path()))
    done: set[tuple[str, str, int]] = set()
    for run in experiment.runs():
        cfg = experiment.config_for(run)
        fc = feature_config(cfg)
        fc = type(fc)(**{**fc.__dict__, "token_tags": tuple(TOKEN_TAGS)})
        if annotator is None:  # the config's spaCy model (all runs share the base's)
            annotator = Annotator(fc.spacy_model, cache_file=args.out)
        key = (cfg.data.train, cfg.data.eval, cfg.train.seed)
        if key in done:
            continue
        done.add(key)
        pool = read_extractive(data_path(cfg, cfg.data.train)).examples
        train = train_subset(pool, parse_train_size(cfg.data.train_size), cfg.train.seed)
        featurize(list(train), tokenizer, fc, training=True, annotator=annotator)
        featurize(load_eval_examples(cfg)[0], tokenizer, fc, annotator=annotator)
        log.info("%s seed %d: cache %d texts", cfg.data.train, cfg.train.seed, len(annotator))
    assert annotator is not None, "the config has no runs"
    print(f"parsed {annotator.misses} new texts, {annotator.hits} served from the cache")


if __name__ == "__main__":
    main()
