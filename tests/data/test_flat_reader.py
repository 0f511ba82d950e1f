"""Flat SQuAD records (Hugging Face's SQuAD lines): read as a user's own file is, detected
from the first record, bad records named by file, record and field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from structqa.data.flat import read_flat
from structqa.data.readers import detect_format, read_examples, read_extractive
from structqa.data.records import Answer, DataError

CONTEXT = "Bees make honey in hives."


def record(qid: str, texts: list[str], starts: list[int], **extra) -> dict:
    return {
        "id": qid,
        "title": "Bees",
        "context": CONTEXT,
        "question": "What do bees make?",
        "answers": {"text": texts, "answer_start": starts},
        **extra,
    }


RECORDS = [record("a1", ["honey"], [10]), record("a2", ["hives"], [19]), record("a3", [], [])]


def write_lines(path: Path, records: list[dict]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("name", ["own.jsonl", "own.jsonl.gz"])
def test_flat_lines_are_detected_and_read_with_unanswerables(tmp_path: Path, name: str) -> None:
    path = write_lines(tmp_path / name, RECORDS)
    assert detect_format(path) == "flat"
    data = read_extractive(path)
    assert data.version == "2.0" and data.report.read == 3
    one, two, three = data.examples
    assert one.answers == (Answer("honey", 10),) and one.title == "Bees"
    assert two.answers == (Answer("hives", 19),) and not two.is_impossible
    assert three.is_impossible and three.answers == () and three.gold_texts == ()


def test_a_json_list_of_flat_records_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "own.json"
    path.write_text(json.dumps(RECORDS[:2], indent=2))
    assert detect_format(path) == "flat"
    data = read_examples(path)
    assert data.version == "1.1" and [e.id for e in data.examples] == ["a1", "a2"]


def test_mrqa_lines_are_still_mrqa(shared_data: Path) -> None:
    assert detect_format(shared_data / "splits" / "squad1-heldout.mrqa.jsonl.gz") == "mrqa"


def test_a_wrong_start_is_repaired_or_kept_for_scoring(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "own.jsonl", [record("a1", ["honey"], [11]), record("a2", ["wax"], [3])]
    )
    data = read_flat(path)
    assert data.examples[0].answers == (Answer("honey", 10),)
    assert data.examples[1].answers == () and data.examples[1].gold_texts == ("wax",)
    assert data.report.warnings["answer_start_repaired"] == 1
    assert data.report.warnings["answer_start_mismatch"] == 1


@pytest.mark.parametrize(
    ("bad", "where", "field"),
    [
        (record("a1", ["honey"], []), "a1 (line 2)", "answers"),
        (record("a1", ["honey"], ["10"]), "a1 (line 2)", "answers.answer_start[0]"),
        ({**record("a1", ["honey"], [10]), "answers": ["honey"]}, "a1 (line 2)", "answers"),
        ({k: v for k, v in record("a1", [], []).items() if k != "question"}, "a1", "question"),
        ({**record("a1", [], []), "id": ""}, "line 2", "id"),  # (a missing id is line-N)
    ],
)
def test_a_bad_record_is_named_by_file_record_and_field(
    tmp_path: Path, bad: dict, where: str, field: str
) -> None:
    path = write_lines(tmp_path / "own.jsonl", [record("a0", ["honey"], [10]), bad])
    with pytest.raises(DataError) as err:
        read_flat(path)
    message = str(err.value)
    assert str(path) in message and where in message and f"field '{field}'" in message


def test_repeated_ids_fail_unless_renamed(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "own.jsonl", [RECORDS[0], RECORDS[0]])
    with pytest.raises(DataError, match="a1"):
        read_flat(path)
    assert [e.id for e in read_extractive(path, dedupe_ids=True).examples] == ["a1", "a1#2"]


def test_a_question_without_readable_text_is_skipped_and_counted(tmp_path: Path) -> None:
    unreadable = {**RECORDS[1], "question": "\u200b\u200d "}  # zero-width only
    data = read_flat(write_lines(tmp_path / "own.jsonl", [RECORDS[0], unreadable]))
    assert [e.id for e in data.examples] == ["a1"]
    assert data.report.skipped == {"empty_question": 1}


def test_a_first_record_longer_than_the_sniffed_head_is_still_flat(tmp_path: Path) -> None:
    long = {**record("a1", ["honey"], [10]), "context": CONTEXT + " word" * 16000}
    assert detect_format(write_lines(tmp_path / "long.jsonl", [long])) == "flat"


def test_score_reads_flat_gold_as_squad2_when_it_has_unanswerables(tmp_path: Path) -> None:
    from structqa.scoring import load_gold

    scheme, gold = load_gold(write_lines(tmp_path / "own.jsonl", RECORDS))
    assert scheme == "squad2" and gold == {"a1": ["honey"], "a2": ["hives"], "a3": []}
    scheme, _ = load_gold(write_lines(tmp_path / "v1.jsonl", RECORDS[:2]))
    assert scheme == "squad1"
    listed = tmp_path / "own.json"
    listed.write_text(json.dumps(RECORDS))
    assert load_gold(listed) == ("squad2", {"a1": ["honey"], "a2": ["hives"], "a3": []})
