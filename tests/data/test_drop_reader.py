"""DROP JSON reader: real shared files and small hand-made bad inputs."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from structqa.data.drop import DropAnswer, DropDataset, DropExample, read_drop
from structqa.data.readers import detect_format, get_reader, read_examples
from structqa.data.records import DataError

PASSAGE = "The Bears scored 14 points in 1985 and 7 in 1986."
NO_DATE = {"day": "", "month": "", "year": ""}


def answer(number: str = "", spans: list[str] | None = None, date: Any = None) -> dict:
    return {"number": number, "date": NO_DATE if date is None else date, "spans": spans or []}


def qa(qid: str, question: str = "How many points?", **changes: Any) -> dict:
    """One DROP question; the answer defaults to the number 14."""
    return {"query_id": qid, "question": question, "answer": answer("14"), **changes}


def write_drop(tmp_path: Path, doc: Any, name: str = "tiny.json") -> Path:
    path = tmp_path / name
    text = doc if isinstance(doc, str) else json.dumps(doc)
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def one_passage(*qas: dict, passage: str = PASSAGE, pid: str = "nfl_1") -> dict:
    return {pid: {"passage": passage, "qa_pairs": list(qas)}}


# --- real files ------------------------------------------------------------------------------

REAL_FILES = [
    # (file, questions, passages, {kind: count}) -- counts from the data README and the files
    ("drop/drop-train-sample.json", 281, 12, {"number": 175, "span": 84, "spans": 18, "date": 4}),
    ("drop/drop-dev-sample.json", 73, 4, {"number": 55, "span": 17, "date": 1}),
    ("drop/drop-mini.json", 19, 3, {"number": 13, "span": 6}),
    (
        "drop/drop-contrast-sets.json",
        947,
        75,
        {"number": 452, "span": 431, "spans": 46, "date": 18},
    ),
]


@pytest.fixture(scope="module")
def read_real(shared_data: Path):
    cache: dict[str, DropDataset] = {}

    def read(name: str) -> DropDataset:
        if name not in cache:
            cache[name] = read_drop(shared_data / name)
        return cache[name]

    return read


@pytest.mark.parametrize(("name", "questions", "passages", "kinds"), REAL_FILES)
def test_real_file_counts_match_the_data_readme(
    read_real, name: str, questions: int, passages: int, kinds: dict[str, int]
) -> None:
    data = read_real(name)
    assert (len(data), len(data.passage_ids), data.version) == (questions, passages, "drop")
    assert data.report.read == questions
    assert data.report.skipped == {}
    assert Counter(ex.answer.kind for ex in data) == kinds
    assert len({ex.id for ex in data}) == questions
    for ex in data:
        assert ex.question.strip() and ex.passage.strip()
        assert not ex.answer.is_empty
        assert all(not v.is_empty for v in ex.validated_answers)


def test_real_file_quirks(read_real) -> None:
    contrast = read_real("drop/drop-contrast-sets.json")
    # Five contrast-set answers and two validated answers give both a number and spans; the
    # number wins, as officially.
    assert contrast.report.warnings == {"several_answer_types": 7}
    both = [a for ex in contrast for a in ex.answers if a.number and a.spans]
    assert len(both) == 7 and sum(1 for ex in contrast if ex.answer in both) == 5
    assert all(a.kind == "number" and a.texts == (a.number,) for a in both)
    assert sum(1 for ex in contrast if ex.validated_answers) == 16
    # Validated answers may have another type than the answer (span "80-yard" vs number "80").
    dev = read_real("drop/drop-dev-sample.json")
    assert dev.report.warnings == {}
    assert all(ex.validated_answers for ex in dev)
    mixed = [(ex, v) for ex in dev for v in ex.validated_answers if v.kind != ex.answer.kind]
    assert (len(mixed), len({ex.id for ex, _ in mixed})) == (8, 4)
    # "date": {} occurs in real files; it reads as an empty date.
    mini = read_real("drop/drop-mini.json")
    assert any(ex.answer.date == ("", "", "") for ex in mini)
    first = mini.examples[0]
    assert isinstance(first, DropExample) and first.passage_id in mini.passage_ids


def test_real_date_answers(read_real) -> None:
    contrast = read_real("drop/drop-contrast-sets.json")
    dates = [ex.answer for ex in contrast if ex.answer.kind == "date"]
    assert ("15", "November", "") in [a.date for a in dates]
    assert all(len(a.texts) == 1 and "  " not in a.texts[0] for a in dates)
    assert DropAnswer(date=("15", "November", "")).texts == ("15 November",)


def test_detection_and_registry(shared_data: Path) -> None:
    path = shared_data / "drop/drop-mini.json"
    assert detect_format(path) == "drop"
    assert get_reader("drop") is read_drop
    data = read_examples(path)
    assert isinstance(data, DropDataset) and len(data) == 19


# --- records ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "kind", "texts"),
    [
        (DropAnswer(number="14"), "number", ("14",)),
        (DropAnswer(spans=("Bears",)), "span", ("Bears",)),
        (DropAnswer(spans=("Bears", "Lions")), "spans", ("Bears", "Lions")),
        (DropAnswer(date=("7", "July", "1345")), "date", ("7 July 1345",)),
        (DropAnswer(date=("", "June", "")), "date", ("June",)),
        (DropAnswer(date=("", "", "1085")), "date", ("1085",)),
        # number, then spans, then date: the official precedence
        (DropAnswer(number="23", spans=("23-yard",)), "number", ("23",)),
        (DropAnswer(spans=("x",), date=("1", "May", "")), "span", ("x",)),
    ],
)
def test_answer_kind_and_texts(record: DropAnswer, kind: str, texts: tuple[str, ...]) -> None:
    assert (record.kind, record.texts, record.is_empty) == (kind, texts, False)


def test_empty_answer_record() -> None:
    empty = DropAnswer()
    assert (empty.kind, empty.texts, empty.is_empty) == ("date", ("",), True)
    assert DropAnswer(spans=(" ",)).is_empty


def test_records_are_frozen(tmp_path: Path) -> None:
    ex = read_drop(write_drop(tmp_path, one_passage(qa("q1")))).examples[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.question = "x"  # type: ignore[misc]
    assert ex.answers == (ex.answer,)


# --- small hand-made files -------------------------------------------------------------------


def test_reads_every_field(tmp_path: Path) -> None:
    doc = {
        "nfl_1": {
            "passage": PASSAGE,
            "qa_pairs": [
                qa("q1"),
                qa(
                    "q2",
                    "Which team?",
                    answer=answer(spans=["Bears"]),
                    validated_answers=[answer(spans=["the Bears"]), answer(number="1")],
                ),
            ],
            "wiki_url": "ignored",
        },
        "hist_2": {
            "passage": "In 1985 it rained.",
            "qa_pairs": [qa("q3", "When?", answer=answer(date={"year": "1985"}))],
        },
    }
    data = read_drop(write_drop(tmp_path, doc, "tiny.json.gz"))
    assert [(ex.id, ex.passage_id) for ex in data] == [
        ("q1", "nfl_1"),
        ("q2", "nfl_1"),
        ("q3", "hist_2"),
    ]
    q1, q2, q3 = data.examples
    assert q1 == DropExample(
        id="q1",
        passage_id="nfl_1",
        question="How many points?",
        passage=PASSAGE,
        answer=DropAnswer(number="14"),
    )
    assert q2.answer == DropAnswer(spans=("Bears",))
    assert q2.validated_answers == (DropAnswer(spans=("the Bears",)), DropAnswer(number="1"))
    assert [a.kind for a in q2.answers] == ["span", "span", "number"]
    assert q3.answer.date == ("", "", "1985")
    assert (q3.answer.kind, q3.answer.texts) == ("date", ("1985",))
    assert data.passage_ids == ("nfl_1", "hist_2")
    assert (data.report.read, data.report.skipped, data.report.warnings) == (3, {}, {})


def test_json_number_is_stringified(tmp_path: Path) -> None:
    doc = one_passage(qa("q1", answer={"number": 12, "spans": []}))
    data = read_drop(write_drop(tmp_path, doc))
    assert data.examples[0].answer.texts == ("12",)


def test_a_json_number_0_is_no_answer_as_officially_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = one_passage(
        qa("q1"), qa("q2", answer={"number": 0, "spans": []}), qa("q3", answer={"number": "0"})
    )
    with caplog.at_level(logging.WARNING, logger="structqa.data"):
        data = read_drop(write_drop(tmp_path, doc))
    assert [ex.id for ex in data] == ["q1", "q3"]  # the string "0" is a number
    assert "a number 0 counts as none, as in the official evaluation" in caplog.text


def test_skips_are_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = {
        **one_passage(
            qa("q1"),
            qa("q2", "   "),
            qa("q3", answer=answer()),
            qa("q4", answer=answer(spans=[" "])),
            qa("q5", validated_answers=[answer(), answer(number="14")]),
            # empty, but validated answers the official evaluation scores it against: kept
            qa("q7", answer=answer(), validated_answers=[answer(number="3"), answer(number="4")]),
        ),
        "empty": {"passage": " \n", "qa_pairs": [qa("q6")]},
    }
    with caplog.at_level(logging.WARNING, logger="structqa.data"):
        data = read_drop(write_drop(tmp_path, doc))
    assert [ex.id for ex in data] == ["q1", "q5", "q7"]
    assert data.report.skipped == {"empty_question": 1, "empty_answer": 2, "empty_passage": 1}
    assert data.report.warnings == {"empty_validated_answer": 1, "empty_answer_validated_kept": 1}
    assert data.examples[1].validated_answers == (DropAnswer(number="14"),)
    q7 = data.examples[2]
    assert (q7.answer, q7.validated_answers) == (DropAnswer(number="3"), (DropAnswer(number="4"),))
    assert "q3 (passage nfl_1)" in caplog.text and "empty_answer" in caplog.text
    assert "read 3 questions" in data.report.summary()


def test_passage_id_mismatch_is_a_warning(tmp_path: Path) -> None:
    doc = one_passage(qa("q1", passage_id="nfl_1"), qa("q2", passage_id="other"))
    data = read_drop(write_drop(tmp_path, doc))
    assert len(data) == 2
    assert data.report.warnings == {"passage_id_mismatch": 1}


def _error(tmp_path: Path, doc: Any) -> DataError:
    path = write_drop(tmp_path, doc)
    with pytest.raises(DataError) as info:
        read_drop(path)
    assert str(path) in str(info.value)
    return info.value


def test_invalid_json(tmp_path: Path) -> None:
    err = _error(tmp_path, '{"nfl_1": {"passage": "x", "qa_pairs": [}')
    assert (err.record, err.field_name) == ("line 1", "(json)")


@pytest.mark.parametrize(
    ("doc", "record", "field"),
    [
        ([], "(top level)", "(passages)"),
        ({"nfl_1": []}, "passage nfl_1", "nfl_1"),
        ({"nfl_1": {"qa_pairs": []}}, "passage nfl_1", "passage"),
        ({"nfl_1": {"passage": "x"}}, "passage nfl_1", "qa_pairs"),
        ({"nfl_1": {"passage": 3, "qa_pairs": []}}, "passage nfl_1", "passage"),
        (one_passage("q1"), "passage nfl_1", "qa_pairs[0]"),  # type: ignore[arg-type]
        (one_passage({"question": "q?"}), "passage nfl_1, qa_pairs[0]", "query_id"),
        (one_passage(qa("")), "passage nfl_1, qa_pairs[0]", "query_id"),
        (one_passage(qa("q1", question=None)), "q1 (passage nfl_1)", "question"),
        (
            one_passage({"query_id": "q1", "question": "q?"}),
            "q1 (passage nfl_1)",
            "answer",
        ),
        (one_passage(qa("q1", answer={"worker_id": "w"})), "q1 (passage nfl_1)", "answer"),
        (one_passage(qa("q1", answer={"spans": "Bears"})), "q1 (passage nfl_1)", "answer.spans"),
        (
            one_passage(qa("q1", answer={"spans": ["Bears", 3]})),
            "q1 (passage nfl_1)",
            "answer.spans[1]",
        ),
        (one_passage(qa("q1", answer={"number": True})), "q1 (passage nfl_1)", "answer.number"),
        (
            one_passage(qa("q1", answer={"date": {"year": 1985}})),
            "q1 (passage nfl_1)",
            "answer.date.year",
        ),
        (
            one_passage(qa("q1", validated_answers={"number": "1"})),
            "q1 (passage nfl_1)",
            "validated_answers",
        ),
        (
            one_passage(qa("q1", validated_answers=[answer("1"), {"date": []}])),
            "q1 (passage nfl_1)",
            "validated_answers[1].date",
        ),
    ],
)
def test_structural_errors_name_file_record_and_field(
    tmp_path: Path, doc: Any, record: str, field: str
) -> None:
    err = _error(tmp_path, doc)
    assert (err.record, err.field_name) == (record, field)


def test_duplicate_query_id_names_both_passages(tmp_path: Path) -> None:
    doc = {**one_passage(qa("q1")), **one_passage(qa("q1"), pid="nfl_2")}
    err = _error(tmp_path, doc)
    assert (err.record, err.field_name) == ("q1 (passage nfl_2)", "query_id")
    assert "first seen in passage nfl_1" in str(err)
