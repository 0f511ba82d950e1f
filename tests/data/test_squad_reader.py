"""SQuAD v1.1 / v2.0 JSON reader: real shared files and small hand-made bad inputs."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from structqa.data.records import Answer, DataError, Dataset
from structqa.data.squad import read_squad

CONTEXT = "The cat sat on the mat. The dog sat on the rug."


def qa(qid: str, question: str = "Who sat?", answers: Any = None, **extra: Any) -> dict:
    """One SQuAD question; answers default to one correctly located answer."""
    if answers is None:
        answers = [{"text": "The cat", "answer_start": 0}]
    return {"id": qid, "question": question, "answers": answers, **extra}


def write_squad(
    tmp_path: Path, qas: list[dict], context: str = CONTEXT, name: str = "tiny.json", **top: Any
) -> Path:
    doc = {"data": [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}], **top}
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --- real files ------------------------------------------------------------------------------

REAL_FILES = [
    # (file, questions, unanswerable, version)
    ("fixtures/squad-v1.1-mini.json", 5, 0, "1.1"),
    ("squad/xquad-en.v1.1.json", 1190, 0, "1.1"),
    ("squad/squad-v2.0-dev-half.json", 6078, 3168, "2.0"),
    ("splits/squad2-train.v2.0.json", 3406, 1753, "2.0"),
    ("splits/squad2-heldout.v2.0.json", 2672, 1415, "2.0"),
]


@pytest.fixture(scope="module")
def read_real(shared_data: Path):
    cache: dict[str, Dataset] = {}

    def read(name: str) -> Dataset:
        if name not in cache:
            cache[name] = read_squad(shared_data / name)
        return cache[name]

    return read


@pytest.mark.parametrize(("name", "questions", "unanswerable", "version"), REAL_FILES)
def test_real_file_counts_match_the_data_readme(
    read_real, name: str, questions: int, unanswerable: int, version: str
) -> None:
    data = read_real(name)
    assert len(data) == questions
    assert data.report.read == questions
    assert sum(e.is_impossible for e in data) == unanswerable
    assert data.version == version
    assert data.report.skipped == {}


@pytest.mark.parametrize("name", [f[0] for f in REAL_FILES])
def test_real_located_answers_match_their_context(read_real, name: str) -> None:
    data = read_real(name)
    for example in data:
        for answer in example.answers:
            assert example.context[answer.start : answer.end] == answer.text, example.id
        if example.is_impossible:
            assert example.answers == () and example.gold_texts == ()
        else:
            assert example.answers, example.id
            assert {a.text for a in example.answers} <= set(example.gold_texts)
    # The shared SQuAD JSON files have no offset problems; a new warning means a reader change.
    assert data.report.warnings == {}


def test_real_ids_are_unique_and_titles_kept(read_real) -> None:
    data = read_real("splits/squad2-train.v2.0.json")
    assert len({e.id for e in data}) == len(data)
    assert all(e.title for e in data)


def test_mini_fixture_fields(read_real) -> None:
    examples = read_real("fixtures/squad-v1.1-mini.json").examples
    first = examples[0]
    assert first.id == "5733be284776f41900661182"
    assert first.title == "University_of_Notre_Dame"
    assert first.answers == (Answer("Saint Bernadette Soubirous", 515),)
    assert first.gold_texts == ("Saint Bernadette Soubirous",)
    assert not first.is_impossible
    # Three annotations, two identical: gold_texts keeps all, located answers de-duplicate.
    second = examples[1]
    assert len(second.gold_texts) == 3
    assert second.gold_texts[0] == second.gold_texts[1] == "a golden statue of the Virgin Mary"
    assert [a.start for a in second.answers] == [92, 0]


# --- well-formed small files -------------------------------------------------------------------


def test_v2_unanswerable_question(tmp_path: Path) -> None:
    plausible = [{"text": "The dog", "answer_start": 24}]
    path = write_squad(
        tmp_path,
        [
            qa("a", is_impossible=False),
            qa("b", "Who flew?", [], is_impossible=True, plausible_answers=plausible),
        ],
        version="v2.0",
    )
    data = read_squad(path)
    assert data.version == "2.0"
    impossible = data.examples[1]
    assert impossible.is_impossible
    assert impossible.answers == () and impossible.gold_texts == ()
    assert data.report.warnings == {}


def test_spaces_around_an_answer_are_not_part_of_its_span(tmp_path: Path) -> None:
    """ "The cat " at 0 is the span "The cat", not one that runs into the next word; " The dog"
    at 23 starts at the "T" of "The"."""
    path = write_squad(
        tmp_path,
        [
            qa("a", answers=[{"text": "The cat ", "answer_start": 0}]),
            qa("b", answers=[{"text": " The dog", "answer_start": 23}]),
        ],
    )
    first, second = read_squad(path).examples
    assert first.answers == (Answer(text="The cat", start=0),)
    assert second.answers == (Answer(text="The dog", start=24),)
    assert CONTEXT[24 : 24 + len("The dog")] == "The dog"


def test_version_from_content_when_no_version_field(tmp_path: Path) -> None:
    assert read_squad(write_squad(tmp_path, [qa("a")])).version == "1.1"
    path = write_squad(tmp_path, [qa("a", is_impossible=False)], name="v2.json")
    assert read_squad(path).version == "2.0"


def test_gzipped_json_is_read(tmp_path: Path) -> None:
    plain = write_squad(tmp_path, [qa("a"), qa("b")])
    packed = tmp_path / "tiny.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [e.id for e in read_squad(packed)] == ["a", "b"]


def test_summary_is_logged_at_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_squad(tmp_path, [qa("a"), qa("b", "  ")])
    with caplog.at_level(logging.INFO, logger="structqa.data"):
        data = read_squad(path)
    summary = data.report.summary()
    assert summary == f"{path}: read 1 questions; skipped 1 (empty_question)"
    assert any(r.levelno == logging.INFO and r.getMessage() == summary for r in caplog.records)


# --- bad input: errors -------------------------------------------------------------------------


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"title": "T",\n  "paragraphs": [}\n]}', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_squad(path)
    assert "broken.json" in str(err.value)
    assert err.value.record == "line 3"
    assert "invalid JSON" in str(err.value)


def test_missing_question_names_file_id_and_field(tmp_path: Path) -> None:
    bad = qa("q-missing")
    del bad["question"]
    path = write_squad(tmp_path, [bad], name="noquestion.json")
    with pytest.raises(DataError) as err:
        read_squad(path)
    message = str(err.value)
    assert "noquestion.json" in message and "q-missing" in message and "'question'" in message
    assert "missing required field" in message


def test_a_mistyped_answer_start_names_the_answer(tmp_path: Path) -> None:
    """(A missing one is found in the context: test_own_labelled_files.)"""
    path = write_squad(tmp_path, [qa("q7", answers=[{"text": "The cat", "answer_start": "0"}])])
    with pytest.raises(DataError) as err:
        read_squad(path)
    assert (err.value.record, err.value.field_name) == ("q7", "answers[0].answer_start")


def test_missing_id_names_the_paragraph(tmp_path: Path) -> None:
    bad = qa("x")
    del bad["id"]
    with pytest.raises(DataError) as err:
        read_squad(write_squad(tmp_path, [qa("a"), bad]))
    assert (err.value.record, err.value.field_name) == ("data[0].paragraphs[0].qas[1]", "id")


def test_missing_context_names_the_paragraph(tmp_path: Path) -> None:
    path = tmp_path / "nocontext.json"
    path.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"qas": []}]}]}))
    with pytest.raises(DataError) as err:
        read_squad(path)
    assert (err.value.record, err.value.field_name) == ("data[0].paragraphs[0]", "context")


def test_missing_data_field(tmp_path: Path) -> None:
    path = tmp_path / "nodata.json"
    path.write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(DataError, match="nodata.json.*'data'.*missing required field"):
        read_squad(path)


def test_wrong_type_is_an_error(tmp_path: Path) -> None:
    path = write_squad(tmp_path, [qa("q1", answers=[{"text": "The cat", "answer_start": "0"}])])
    with pytest.raises(DataError, match="expected integer, got str") as err:
        read_squad(path)
    assert err.value.field_name == "answers[0].answer_start"


def test_duplicate_id_is_an_error_naming_both_places(tmp_path: Path) -> None:
    path = write_squad(tmp_path, [qa("same"), qa("other"), qa("same")])
    with pytest.raises(DataError, match="duplicate question id 'same'") as err:
        read_squad(path)
    assert err.value.field_name == "id"
    assert err.value.record == "data[0].paragraphs[0].qas[2]"
    assert "first at data[0].paragraphs[0].qas[0]" in str(err.value)
    assert "--data.dedupe_ids" in str(err.value)


def test_dedupe_ids_renames_repeats_in_file_order_and_counts_them(tmp_path: Path) -> None:
    # "same#2" already exists, so the second repeat of "same" skips to "same#3"
    qas = [qa("same"), qa("same#2"), qa("same"), qa("same"), qa("other")]
    data = read_squad(write_squad(tmp_path, qas), dedupe_ids=True)
    assert [e.id for e in data.examples] == ["same", "same#2", "same#3", "same#4", "other"]
    assert data.report.warnings == {"duplicate_id_renamed": 2}
    assert "duplicate_id_renamed" in data.report.summary()
    # the same file gives the same names every time
    again = read_squad(write_squad(tmp_path, qas, name="again.json"), dedupe_ids=True)
    assert [e.id for e in again.examples] == [e.id for e in data.examples]


def test_a_file_without_a_version_key_is_read_and_says_so(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="structqa.data")
    plain = read_squad(write_squad(tmp_path, [qa("q1")], name="plain.json"))
    assert plain.version == "1.1" and len(plain) == 1
    assert "no 'version' key; read as SQuAD v1.1" in caplog.text
    caplog.clear()
    unanswerable = qa("q2", answers=[], is_impossible=True)
    v2 = read_squad(write_squad(tmp_path, [qa("q1"), unanswerable], name="v2.json"))
    assert v2.version == "2.0" and v2.examples[1].is_impossible
    assert "no 'version' key; read as SQuAD v2.0" in caplog.text
    caplog.clear()
    read_squad(write_squad(tmp_path, [qa("q1")], name="declared.json", version="1.1"))
    assert "no 'version' key" not in caplog.text


def test_impossible_with_answers_is_an_error(tmp_path: Path) -> None:
    path = write_squad(tmp_path, [qa("q1", is_impossible=True)])
    with pytest.raises(DataError, match="is_impossible is true") as err:
        read_squad(path)
    assert (err.value.record, err.value.field_name) == ("q1", "answers")


def test_answerable_without_answers_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not is_impossible"):
        read_squad(write_squad(tmp_path, [qa("q1", answers=[])]))


# --- bad input: repaired, kept or skipped --------------------------------------------------------


def test_mismatched_answer_start_keeps_text_for_scoring(tmp_path: Path) -> None:
    answers = [{"text": "the rug", "answer_start": 2}, {"text": "The cat", "answer_start": 0}]
    data = read_squad(write_squad(tmp_path, [qa("q1", answers=answers)]))
    example = data.examples[0]
    assert example.gold_texts == ("the rug", "The cat")
    assert example.answers == (Answer("The cat", 0),)
    assert data.report.warnings == {"answer_start_mismatch": 1}


def test_no_located_answer_left_is_kept_and_counted(tmp_path: Path) -> None:
    answers = [{"text": "a unicorn", "answer_start": 5}]
    data = read_squad(write_squad(tmp_path, [qa("q1", answers=answers)]))
    assert len(data) == 1
    assert data.examples[0].gold_texts == ("a unicorn",)
    assert data.examples[0].answers == ()
    assert data.report.warnings == {"answer_start_mismatch": 1, "no_located_answer": 1}


def test_off_by_one_answer_start_is_repaired(tmp_path: Path) -> None:
    # "dog" really starts at 28; off-by-one offsets are common in real data.
    data = read_squad(
        write_squad(tmp_path, [qa("q1", answers=[{"text": "dog", "answer_start": 29}])])
    )
    assert data.examples[0].answers == (Answer("dog", 28),)
    assert data.report.warnings == {"answer_start_repaired": 1}


def test_repair_picks_the_nearest_occurrence(tmp_path: Path) -> None:
    # "no." occurs at 0, 7 and 14; a start of 9 is nearest to 7.
    answers = [{"text": "no.", "answer_start": 9}]
    path = write_squad(tmp_path, [qa("q1", answers=answers)], context="no. 1, no. 2, no. 3")
    assert read_squad(path).examples[0].answers == (Answer("no.", 7),)


def test_occurrence_beyond_the_window_is_not_used(tmp_path: Path) -> None:
    context = "dog " + "x" * 60
    answers = [{"text": "dog", "answer_start": 40}]
    data = read_squad(write_squad(tmp_path, [qa("q1", answers=answers)], context=context))
    assert data.examples[0].answers == ()
    assert data.report.warnings["answer_start_mismatch"] == 1


def test_empty_question_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_squad(tmp_path, [qa("a"), qa("blank", " \t"), qa("c")])
    with caplog.at_level(logging.WARNING, logger="structqa.data"):
        data = read_squad(path)
    assert [e.id for e in data] == ["a", "c"]
    assert data.report.read == 2
    assert data.report.skipped == {"empty_question": 1}
    assert any("blank" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_empty_context_skips_its_questions(tmp_path: Path) -> None:
    data = read_squad(write_squad(tmp_path, [qa("a"), qa("b")], context="   "))
    assert len(data) == 0
    assert data.report.skipped == {"empty_context": 2}


def test_a_question_or_context_without_a_character_a_model_reads_is_skipped(
    tmp_path: Path,
) -> None:
    """Only zero-width or control characters: refused by predict --question and the service,
    it was answered from a file (one window, no context token: noise)."""
    path = write_squad(tmp_path, [qa("a"), qa("zw", "\u200b\u200d ")])
    data = read_squad(path)
    assert [e.id for e in data] == ["a"] and data.report.skipped == {"empty_question": 1}
    data = read_squad(write_squad(tmp_path, [qa("b")], context="\u200b\u2060"))
    assert len(data) == 0 and data.report.skipped == {"empty_context": 1}


def test_a_negative_answer_start_far_from_the_text_is_not_located(tmp_path: Path) -> None:
    """A start of -100 searches 20 characters around -100: nothing; not the whole context
    (a negative end would have str.find count from the back)."""
    answers = [{"text": "dog", "answer_start": -100}]
    data = read_squad(write_squad(tmp_path, [qa("q1", answers=answers)], context=CONTEXT))
    assert data.examples[0].answers == ()
    assert data.report.warnings["answer_start_mismatch"] == 1
    near = [{"text": "The cat", "answer_start": -3}]  # within the window: repaired to 0
    again = read_squad(write_squad(tmp_path, [qa("q1", answers=near)], context=CONTEXT))
    assert again.examples[0].answers == (Answer("The cat", 0),)
