"""A user's own file: a validation share that would take most of it is refused with a remedy,
and a run that draws fewer questions than the file holds says so."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from structqa.config import load_config
from structqa.data import validation_split
from structqa.data.readers import read_extractive
from structqa.models.build import build_model
from structqa.training.data import prepare_data, split_training_file


def _document_file(path: Path, sizes: list[int]) -> Path:
    """A SQuAD v1.1 file of one long passage per size, with that many questions each."""
    paragraphs = []
    for d, size in enumerate(sizes):
        context = f"Manual {d} says the pump number {d} runs at {d + 3} bar. " * 4
        qas = [
            {
                "id": f"d{d}-q{q}",
                "question": f"What does manual {d} say, question {q}?",
                "answers": [
                    {"text": f"{d + 3} bar", "answer_start": context.index(f"{d + 3} bar")}
                ],
            }
            for q in range(size)
        ]
        paragraphs.append({"context": context, "qas": qas})
    path.write_text(
        json.dumps({"version": "1.1", "data": [{"title": "m", "paragraphs": paragraphs}]})
    )
    return path


def test_a_validation_share_that_takes_most_of_the_file_is_refused(tmp_path: Path) -> None:
    path = _document_file(tmp_path / "manuals.json", [250, 25, 25])
    examples = read_extractive(path).examples
    # a seed that draws the big document first (passages go whole to one side)
    seed = next(s for s in range(50) if len(validation_split(examples, 0.1, s)[1]) == 250)
    cfg = load_config(
        None,
        [f"data.train={path}", "data.validation=0.1", f"data.validation_seed={seed}"],
    )
    with pytest.raises(ValueError, match=r"took 250 of its 300 questions.*--data.validation=FILE"):
        split_training_file(cfg)
    # a seed that draws both small ones first: 50 of 300, as near 10 % as whole passages go
    other = next(s for s in range(50) if len(validation_split(examples, 0.1, s)[1]) == 50)
    ok = load_config(
        None, [f"data.train={path}", "data.validation=0.1", f"data.validation_seed={other}"]
    )
    train, val, _ = split_training_file(ok)
    assert (len(train), len(val)) == (250, 50)


def test_a_run_drawing_fewer_questions_than_the_file_holds_says_so(
    tmp_path: Path, tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _document_file(tmp_path / "manuals.json", [8, 8, 8, 8])
    common = [f"model.encoder={tiny_checkpoint}", f"data.train={path}", "data.max_seq_len=128"]
    common += ["data.doc_stride=32", "data.validation=0.25"]
    cfg = load_config(None, [*common, "data.train_size=10"])
    _, tokenizer = build_model(cfg)
    with caplog.at_level(logging.INFO, logger="structqa.training.data"):
        prepare_data(cfg, tokenizer)
    assert "training on 10 of the 24 questions" in caplog.text
    assert "--data.train_size=all" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="structqa.training.data"):
        prepare_data(load_config(None, [*common, "data.train_size=all"]), tokenizer)
    assert "training on" not in caplog.text


def test_a_lopsided_share_of_a_smoke_test_file_is_warned_of_not_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _document_file(tmp_path / "tiny.json", [3, 1, 1])
    examples = read_extractive(path).examples
    seed = next(s for s in range(50) if len(validation_split(examples, 0.1, s)[1]) == 3)
    cfg = load_config(None, [f"data.train={path}", f"data.validation_seed={seed}"])
    with caplog.at_level(logging.WARNING, logger="structqa.training.data"):
        train, val, _ = split_training_file(cfg)
    assert (len(train), len(val)) == (2, 3) and "took 3 of its 5 questions" in caplog.text
