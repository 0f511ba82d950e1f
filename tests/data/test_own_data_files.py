"""The shipped own-data example (tests/data/files/own-data/): hand-written SQuAD files about
honey bees, without a ``version`` key, as a user's own files often are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.data.readers import read_extractive

OWN_DATA = Path(__file__).resolve().parent / "files" / "own-data"
FILES = {"bees-train.json": 40, "bees-test.json": 15}


def raw_questions(path: Path) -> list[tuple[str, dict]]:
    """(context, qa) pairs straight from the JSON, independent of structqa's readers."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [
        (paragraph["context"], qa)
        for article in doc["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]


@pytest.mark.parametrize(("name", "questions"), sorted(FILES.items()))
def test_every_answer_start_points_at_its_answer(name: str, questions: int) -> None:
    pairs = raw_questions(OWN_DATA / name)
    assert len(pairs) == questions
    for context, qa in pairs:
        for answer in qa["answers"]:
            start = answer["answer_start"]
            assert context[start : start + len(answer["text"])] == answer["text"], qa["id"]


@pytest.mark.parametrize(("name", "questions"), sorted(FILES.items()))
def test_the_reader_takes_them_as_squad_1_1_without_repairs(name: str, questions: int) -> None:
    doc = json.loads((OWN_DATA / name).read_text(encoding="utf-8"))
    assert "version" not in doc  # the case the example stands for
    ds = read_extractive(OWN_DATA / name)
    assert ds.version == "1.1" and len(ds) == questions
    assert ds.report.warnings == {} and ds.report.skipped == {}
    assert all(len(ex.answers) == 1 for ex in ds.examples)


def test_train_and_test_share_no_paragraph_or_id() -> None:
    train = read_extractive(OWN_DATA / "bees-train.json").examples
    test = read_extractive(OWN_DATA / "bees-test.json").examples
    assert not {e.context for e in train} & {e.context for e in test}
    assert not {e.id for e in train} & {e.id for e in test}
