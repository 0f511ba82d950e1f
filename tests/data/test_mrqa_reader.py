"""MRQA jsonl(.gz) reader: real shared files and small hand-made bad inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from structqa.data.mrqa import read_mrqa
from structqa.data.records import Answer, DataError, Dataset

CONTEXT = "Denver Broncos beat the Carolina Panthers."
HEADER = {"header": {"dataset": "SQuAD", "split": "dev"}}


def mrqa_qa(qid: str = "q1", **changes: Any) -> dict:
    """One MRQA question whose detected answer is correctly located."""
    qa = {
        "id": qid,
        "qid": "mrqa-" + qid,
        "question": "Who won?",
        "answers": ["Denver Broncos", "Broncos"],
        "detected_answers": [
            {"text": "Denver Broncos", "char_spans": [[0, 13]]},
            {"text": "Broncos", "char_spans": [[7, 13]]},
        ],
    }
    qa.update(changes)
    return qa


def write_mrqa(
    tmp_path: Path, records: list[Any], name: str = "tiny.jsonl", header: bool = True
) -> Path:
    lines = ([json.dumps(HEADER)] if header else []) + [
        r if isinstance(r, str) else json.dumps(r) for r in records
    ]
    path = tmp_path / name
    text = "\n".join(lines) + "\n"
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def record(*qas: dict, context: str = CONTEXT) -> dict:
    return {"id": "", "context": context, "qas": list(qas)}


# --- real files ------------------------------------------------------------------------------

REAL_FILES = [
    # (file, questions, paragraphs)
    ("splits/squad1-train.mrqa.jsonl.gz", 8330, 1662),
    ("splits/squad1-heldout.mrqa.jsonl.gz", 2177, 405),
    ("squad/squad-v1.1-dev.mrqa.jsonl.gz", 10507, 2067),
]


@pytest.fixture(scope="module")
def read_real(shared_data: Path):
    cache: dict[str, Dataset] = {}

    def read(name: str) -> Dataset:
        if name not in cache:
            cache[name] = read_mrqa(shared_data / name)
        return cache[name]

    return read


@pytest.mark.parametrize(("name", "questions", "paragraphs"), REAL_FILES)
def test_real_file_counts_match_the_data_readme(
    read_real, name: str, questions: int, paragraphs: int
) -> None:
    data = read_real(name)
    assert len(data) == questions
    assert data.report.read == questions
    assert len({e.context for e in data}) == paragraphs
    assert data.version == "mrqa"
    assert data.report.skipped == {}
    assert not any(e.is_impossible for e in data)


@pytest.mark.parametrize("name", [f[0] for f in REAL_FILES])
def test_real_located_answers_match_their_context(read_real, name: str) -> None:
    data = read_real(name)
    for example in data:
        assert example.answers, example.id
        assert example.gold_texts, example.id
        for answer in example.answers:
            assert example.context[answer.start : answer.end] == answer.text, example.id
    # MRQA's only quirk here: some spans cover a normalised form of the detected text.
    assert set(data.report.warnings) <= {"span_text_differs"}


def test_real_ids_are_original_squad_ids(read_real) -> None:
    first = read_real("squad/squad-v1.1-dev.mrqa.jsonl.gz").examples[0]
    assert first.id == "56be4db0acb8001400a502ec"
    assert first.gold_texts == ("Denver Broncos",) * 3
    assert first.answers == (Answer("Denver Broncos", 177),)


def test_real_splits_partition_the_dev_set(read_real) -> None:
    train = read_real("splits/squad1-train.mrqa.jsonl.gz")
    heldout = read_real("splits/squad1-heldout.mrqa.jsonl.gz")
    dev = read_real("squad/squad-v1.1-dev.mrqa.jsonl.gz")
    train_ids, heldout_ids = {e.id for e in train}, {e.id for e in heldout}
    assert not train_ids & heldout_ids
    assert train_ids | heldout_ids == {e.id for e in dev}
    assert not {e.context for e in train} & {e.context for e in heldout}


# --- well-formed small files -------------------------------------------------------------------


def test_small_file_fields(tmp_path: Path) -> None:
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa("a")), record(mrqa_qa("b"))]))
    assert [e.id for e in data] == ["a", "b"]
    example = data.examples[0]
    assert example.gold_texts == ("Denver Broncos", "Broncos")
    assert example.answers == (Answer("Denver Broncos", 0), Answer("Broncos", 7))
    assert example.title == "" and not example.is_impossible
    assert data.report.warnings == {}


def test_gzipped_file_is_read(tmp_path: Path) -> None:
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa("a"))], name="tiny.jsonl.gz"))
    assert [e.id for e in data] == ["a"]


def test_empty_id_falls_back_to_qid(tmp_path: Path) -> None:
    qa = mrqa_qa("x", id="")
    no_id = mrqa_qa("y")
    del no_id["id"]
    data = read_mrqa(write_mrqa(tmp_path, [record(qa, no_id)]))
    assert [e.id for e in data] == ["mrqa-x", "mrqa-y"]


def test_integer_ids_are_read_as_their_text(tmp_path: Path) -> None:
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa("x", id=17))]))
    assert [e.id for e in data] == ["17"]


def test_repeated_spans_give_one_located_answer(tmp_path: Path) -> None:
    detected = [{"text": "Broncos", "char_spans": [[7, 13]]}] * 3
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa(detected_answers=detected))]))
    assert data.examples[0].answers == (Answer("Broncos", 7),)


def test_span_text_is_taken_from_the_context(tmp_path: Path) -> None:
    # MRQA pairs the text "The Broncos" with the span of "Broncos" (matched after normalising).
    detected = [{"text": "The Broncos", "char_spans": [[7, 13]]}]
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa(detected_answers=detected))]))
    assert data.examples[0].answers == (Answer("Broncos", 7),)
    assert data.report.warnings == {"span_text_differs": 1}


def test_missing_header_is_counted_and_nothing_lost(tmp_path: Path) -> None:
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa("a"))], header=False))
    assert len(data) == 1
    assert data.report.warnings == {"missing_header": 1}


# --- bad input -----------------------------------------------------------------------------------


def test_invalid_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = write_mrqa(tmp_path, [record(mrqa_qa("a")), '{"context": "x", "qas": ['])
    with pytest.raises(DataError) as err:
        read_mrqa(path)
    assert "tiny.jsonl" in str(err.value)
    assert err.value.record == "line 3"
    assert "invalid JSON" in str(err.value)


def test_missing_detected_answers_names_id_and_field(tmp_path: Path) -> None:
    qa = mrqa_qa("q9")
    del qa["detected_answers"]
    with pytest.raises(DataError) as err:
        read_mrqa(write_mrqa(tmp_path, [record(qa)], name="nodetected.jsonl"))
    message = str(err.value)
    assert "nodetected.jsonl" in message and "q9" in message and "'detected_answers'" in message


def test_missing_context_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        read_mrqa(write_mrqa(tmp_path, [{"qas": []}]))
    assert (err.value.record, err.value.field_name) == ("line 2", "context")


def test_bad_char_span_is_an_error(tmp_path: Path) -> None:
    detected = [{"text": "Broncos", "char_spans": [[7]]}]
    with pytest.raises(DataError) as err:
        read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa(detected_answers=detected))]))
    assert err.value.field_name == "detected_answers[0].char_spans[0]"


def test_out_of_range_span_is_dropped_and_counted(tmp_path: Path) -> None:
    detected = [
        {"text": "Broncos", "char_spans": [[7, 13], [100, 106]]},
    ]
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa(detected_answers=detected))]))
    assert data.examples[0].answers == (Answer("Broncos", 7),)
    assert data.report.warnings == {"char_span_out_of_range": 1}


def test_no_located_answer_is_kept_and_counted(tmp_path: Path) -> None:
    data = read_mrqa(write_mrqa(tmp_path, [record(mrqa_qa(detected_answers=[]))]))
    assert len(data) == 1
    assert data.examples[0].gold_texts == ("Denver Broncos", "Broncos")
    assert data.report.warnings == {"no_located_answer": 1}


def test_duplicate_id_across_lines_is_an_error(tmp_path: Path) -> None:
    path = write_mrqa(tmp_path, [record(mrqa_qa("dup")), record(mrqa_qa("dup"))])
    with pytest.raises(DataError, match="duplicate question id 'dup'") as err:
        read_mrqa(path)
    assert err.value.record == "dup (line 3)"
    assert "first at dup (line 2)" in str(err.value)


def test_dedupe_ids_renames_repeated_ids_across_lines(tmp_path: Path) -> None:
    path = write_mrqa(tmp_path, [record(mrqa_qa("dup")), record(mrqa_qa("dup"))])
    data = read_mrqa(path, dedupe_ids=True)
    assert [e.id for e in data.examples] == ["dup", "dup#2"]
    assert data.report.warnings == {"duplicate_id_renamed": 1}


def test_empty_question_and_context_are_skipped(tmp_path: Path) -> None:
    records = [
        record(mrqa_qa("a"), mrqa_qa("blank", question="")),
        record(mrqa_qa("b"), context="\n "),
    ]
    data = read_mrqa(write_mrqa(tmp_path, records))
    assert [e.id for e in data] == ["a"]
    assert data.report.skipped == {"empty_question": 1, "empty_context": 1}


def test_corrupt_gzip_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(b"this is not gzip data\n")
    with pytest.raises(DataError, match="corrupt.jsonl.gz.*unreadable data"):
        read_mrqa(path)
