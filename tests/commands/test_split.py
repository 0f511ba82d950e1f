"""`structqa split`: K folds of a QA file by passage; every question in exactly one test fold,
a passage's questions together, and no passage on both sides of a fold."""

from __future__ import annotations

from pathlib import Path

from structqa.cli import main
from structqa.data.readers import read_extractive


def test_folds_partition_the_questions_by_passage(shared_data: Path, tmp_path: Path, capsys):
    source = shared_data / "squad" / "xquad-en.v1.1.json"
    assert main(["split", str(source), "--out", str(tmp_path), "--folds", "3"]) == 0
    assert "1190 questions over 240 passages" in capsys.readouterr().out
    seen: list[str] = []
    for i in range(3):
        train = read_extractive(tmp_path / f"fold{i}-train.json").examples
        test = read_extractive(tmp_path / f"fold{i}-test.json").examples
        assert not {e.context for e in train} & {e.context for e in test}
        assert len(train) + len(test) == 1190
        seen += [e.id for e in test]
    assert sorted(seen) == sorted(e.id for e in read_extractive(source).examples)


def test_a_test_fold_keeps_every_gold_answer(tmp_path: Path) -> None:
    """A gold text whose answer_start is wrong is not a training target, but it is still a
    right answer to score against: the test fold keeps it."""
    import json

    context = "The Broncos beat the Panthers in Santa Clara. " * 2
    qas = [
        {
            "id": f"q{i}",
            "question": "Who won?",
            "answers": [
                {"text": "The Broncos", "answer_start": 0},
                {"text": "Denver", "answer_start": 3},  # in no passage: not located
                {"text": " the Panthers ", "answer_start": 16},  # spaces around it
            ],
        }
        for i in range(2)
    ]
    paragraphs = [{"context": f"{context}{i}", "qas": [qas[i]]} for i in range(2)]
    source = tmp_path / "own.json"
    source.write_text(
        json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": paragraphs}]})
    )
    assert main(["split", str(source), "--out", str(tmp_path / "folds"), "--folds", "2"]) == 0
    for i in range(2):
        (test,) = read_extractive(tmp_path / "folds" / f"fold{i}-test.json").examples
        assert test.gold_texts == ("The Broncos", "Denver", " the Panthers ")
        assert [(a.text, a.start) for a in test.answers] == [
            ("The Broncos", 0),
            ("the Panthers", 17),
        ]
        (train,) = read_extractive(tmp_path / "folds" / f"fold{i}-train.json").examples
        assert [a.text for a in train.answers] == ["The Broncos", "the Panthers"]
