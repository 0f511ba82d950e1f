"""data.exclude: training questions on the passages of held-out files are dropped, whatever
their spacing or case, and the drop is counted per file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.config import load_config
from structqa.data.overlap import drop_overlap, passage_key
from structqa.data.readers import read_extractive
from structqa.training.data import split_training_file

OWN_DATA = Path(__file__).resolve().parent / "files" / "own-data"
TRAIN, TEST = OWN_DATA / "bees-train.json", OWN_DATA / "bees-test.json"


def squad_file(path: Path, contexts: list[str]) -> Path:
    paragraphs = [
        {"context": c, "qas": [{"id": f"q{i}", "question": "What?", "answers": []}]}
        for i, c in enumerate(contexts)
    ]
    doc = {"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}
    for p in paragraphs:
        p["qas"][0]["is_impossible"] = True
    path.write_text(json.dumps(doc))
    return path


def test_passage_key_ignores_case_spacing_and_punctuation_only() -> None:
    assert passage_key("The  Bee,\nflies.") == passage_key("the bee flies")
    assert passage_key("The bee flies") != passage_key("The bees fly")


def test_questions_on_an_excluded_passage_are_dropped_and_counted(tmp_path: Path) -> None:
    pool = read_extractive(TRAIN).examples
    contexts = list(dict.fromkeys(e.context for e in pool))
    # one passage as it is, another re-spaced and upper-cased, one passage nobody trains on
    held = squad_file(
        tmp_path / "held.json",
        [contexts[0], "  ".join(contexts[1].upper().split()), "An unrelated passage."],
    )
    kept, report = drop_overlap(pool, [held])
    gone = {contexts[0], contexts[1]}
    assert [e.id for e in kept] == [e.id for e in pool if e.context not in gone]
    dropped = sum(e.context in gone for e in pool)
    assert dropped > 0 and report.dropped == dropped and report.kept == len(kept)
    assert report.dropped_by_file == {str(held): dropped}
    assert f"dropped {dropped}" in report.summary()


def test_the_training_split_drops_them_before_validation_and_says_so(tmp_path: Path) -> None:
    pool = read_extractive(TRAIN).examples
    first = pool[0].context
    held = squad_file(tmp_path / "held.json", [first])
    cfg = load_config(
        overrides=[
            f"data.train={TRAIN}",
            "data.train_size=all",
            "data.validation=0.2",
            f"data.exclude=[{held}]",
        ]
    )
    train, val, _ = split_training_file(cfg)
    assert val is not None
    assert first not in {e.context for e in train} | {e.context for e in val}
    assert len(train) + len(val) == len(pool) - sum(e.context == first for e in pool)


def test_excluding_every_passage_is_an_error_that_names_the_files(tmp_path: Path) -> None:
    contexts = list(dict.fromkeys(e.context for e in read_extractive(TRAIN).examples))
    held = squad_file(tmp_path / "held.json", contexts)
    cfg = load_config(
        overrides=[f"data.train={TRAIN}", "data.validation=none", f"data.exclude=[{held}]"]
    )
    with pytest.raises(ValueError, match="nothing is left to train on") as err:
        split_training_file(cfg)
    assert str(held) in str(err.value)
