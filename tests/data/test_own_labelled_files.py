"""A user's own labelled file, as people write one by hand: records that are not quite flat
SQuAD, text saved in a legacy encoding, SQuAD answers without offsets. Each is read, or is
refused naming the file, the record and what to write instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.data.flat import read_flat
from structqa.data.readers import detect_format, read_examples, read_extractive
from structqa.data.records import Answer, DataError
from structqa.data.squad import read_squad

CONTEXT = "Bees make honey in hives. Honey keeps for years."
QUESTION = "What do bees make?"


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def squad_doc(*answers: dict) -> dict:
    qa = {"id": "q1", "question": QUESTION, "answers": list(answers)}
    return {"data": [{"title": "Bees", "paragraphs": [{"context": CONTEXT, "qas": [qa]}]}]}


@pytest.mark.parametrize("name", ["mine.jsonl", "mine.json"])
def test_records_with_a_singular_answer_show_the_shapes_that_are_read(
    tmp_path: Path, name: str
) -> None:
    """{"question", "context", "answer"} was read as MRQA: a missing header, then 'qas'."""
    records = [{"question": QUESTION, "context": CONTEXT, "answer": "honey"}] * 2
    path = tmp_path / name
    if name.endswith(".jsonl"):
        write_lines(path, records)
    else:
        path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    assert detect_format(path) == "flat"
    with pytest.raises(DataError) as err:
        read_examples(path)
    said = str(err.value)
    where = "line 1" if name.endswith(".jsonl") else "record 1"
    assert said.startswith(f"{path}: record '{where}', field 'answers'")
    assert "the record's keys: question, context, answer" in said
    assert '"answers": {"text": ["..."], "answer_start": [12]}' in said  # the flat shape
    assert '"qas": [{' in said and '"detected_answers"' in said  # the MRQA shape
    assert "qas" not in err.value.field_name and "header" not in said


def test_every_missing_key_of_a_record_is_named_at_once(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "mine.jsonl", [{"id": "q7", "question": QUESTION}])
    with pytest.raises(DataError) as err:
        read_flat(path)
    assert err.value.record == "q7 (line 1)" and err.value.field_name == "context, answers"
    assert "missing required field(s) context, answers" in str(err.value)


def test_a_record_without_id_is_named_by_its_line_or_place(tmp_path: Path) -> None:
    answers = {"text": ["honey"], "answer_start": [10]}
    record = {"question": QUESTION, "context": CONTEXT, "answers": answers}
    lines = write_lines(tmp_path / "mine.jsonl", [record, {**record, "id": "x"}, record])
    assert [e.id for e in read_extractive(lines).examples] == ["line-1", "x", "line-3"]
    listed = tmp_path / "mine.json"
    listed.write_text(json.dumps([record, record]), encoding="utf-8")
    data = read_extractive(listed)
    assert [e.id for e in data.examples] == ["record-1", "record-2"]
    assert data.examples[0].answers == (Answer("honey", 10),)


@pytest.mark.parametrize("name", ["latin.json", "latin.jsonl"])
def test_a_file_not_in_utf8_names_the_line_and_says_to_save_it_as_utf8(
    tmp_path: Path, name: str
) -> None:
    """Both said only "unreadable ...: 'utf-8' codec can't decode byte 0xe9"."""
    if name.endswith(".jsonl"):
        answers = {"text": ["honey"], "answer_start": [10]}
        records = [
            {"id": f"q{i}", "question": QUESTION, "context": CONTEXT, "answers": answers}
            for i in range(3)
        ]
        text = "".join(json.dumps(r) + "\n" for r in records)
        text = text.replace('"q2", "question": "What', '"q2", "question": "Caf\u00e9? What')
        line = 3
    else:
        text = json.dumps(squad_doc({"text": "honey", "answer_start": 10}), indent=1)
        text = text.replace("What do", "Caf\u00e9: what do")
        line = 1 + text[: text.index("Caf")].count("\n")
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError) as err:
        read_examples(path)
    said = str(err.value)
    assert said.startswith(f"{path}: record 'line {line}'")
    assert "byte 0xe9" in said and "save the file as UTF-8" in said and "codec" not in said


def test_a_squad_answer_without_answer_start_is_found_in_the_context(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    doc = squad_doc({"text": "Honey"}, {"text": "honey", "answer_start": None}, {"text": "wax"})
    path.write_text(json.dumps(doc), encoding="utf-8")
    data = read_squad(path)
    (example,) = data.examples
    assert example.answers == (Answer("Honey", 26), Answer("honey", 10))
    assert example.gold_texts == ("Honey", "honey", "wax")
    assert data.report.warnings == {"answer_start_missing": 2, "answer_not_in_context": 1}
