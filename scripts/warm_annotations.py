"""Parse, once, every text that fine-tuning with token tags will annotate, into a cache file.

For a machine without spaCy (e.g. a GPU box that cannot install it): run this where spaCy is,
carry the cache, and point ``data.annotation_cache`` at it. An ``Annotator`` reading the cache
then never loads spaCy; a text missing from it still needs spaCy, so a gap fails loudly.

    python scripts/warm_annotations.py configs/anna/gpu.yaml --out runs/anna/annotations.jsonl
    python scripts/warm_annotations.py configs/ncbert/drop3k-gpu.yaml \
        --out runs/ncbert/annotations.jsonl

For a SQuAD-style config it featurizes, with the config's tokenizer and windows, the training
subset of every seed in the config's grid and the whole evaluation split, exactly as
``structqa train`` does, with both token tags on (the parse of a text does not depend on which
tags are read from it). For a DROP config (``kind: drop``) it parses every question and
passage of the training, evaluation and test files of every run, which is what the NC layer's
entity and sentence tables read.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from structqa.experiments.grid import load_experiment
from structqa.features.squad import TOKEN_TAGS
from structqa.paths import default_encoder_path
from structqa.training.data import prepare_data

log = logging.getLogger("warm_annotations")


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", help="experiment YAML")
    p.add_argument("--out", required=True, help="annotation cache (JSONL, appended to)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from transformers import AutoTokenizer

    experiment = load_experiment(Path(args.config))
    out = Path(args.out)
    if experiment.kind == "drop":
        before = _lines(out)
        _warm_drop(experiment, out)
        print(f"parsed {_lines(out) - before} new texts into {out}")
        return
    tokenizer = AutoTokenizer.from_pretrained(str(default_encoder_path()))
    before = _lines(out)
    done: set[tuple[str, str, int]] = set()
    for run in experiment.runs():
        cfg = experiment.config_for(run)
        key = (cfg.data.train, cfg.data.eval, cfg.train.seed)
        if key in done:
            continue
        done.add(key)
        # what `structqa train` featurizes, with both tags on and the cache as its annotator's
        cfg.data.token_tags = list(TOKEN_TAGS)
        cfg.data.annotation_cache = str(out)
        prepare_data(cfg, tokenizer)
        log.info("%s seed %d done", cfg.data.train, cfg.train.seed)
    print(f"parsed {_lines(out) - before} new texts into {out}")


def _warm_drop(experiment, out: Path) -> None:
    """Parse the questions and passages of every DROP file the runs read into ``out``."""
    from structqa.data.drop import read_drop
    from structqa.ncbert.loop import resolve_drop_file
    from structqa.text.annotate import Annotator

    files: dict[Path, str] = {}  # file -> the spaCy model its runs annotate with
    for run in experiment.runs():
        d = experiment.config_for(run).data
        for name in [*d.train, d.eval, d.test]:
            if name:
                files[resolve_drop_file(name, d.dir)] = d.spacy_model
    annotators: dict[str, Annotator] = {}
    for path, model in files.items():
        if model not in annotators:  # (each reads the whole cache once)
            annotators[model] = Annotator(model, cache_file=out)
        annotator = annotators[model]
        examples = read_drop(path).examples
        annotator.annotate([t for ex in examples for t in (ex.question, ex.passage)])
        log.info("%s: %d questions (%d texts parsed so far)", path, len(examples), annotator.misses)


if __name__ == "__main__":
    main()
