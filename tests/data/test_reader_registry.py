"""Reader registry and format detection."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from structqa.data.readers import READERS, detect_format, get_reader, read_examples
from structqa.data.squad import read_squad

SQUAD_DOC = {
    "version": "1.1",
    "data": [
        {
            "title": "T",
            "paragraphs": [
                {
                    "context": "Paris is in France.",
                    "qas": [
                        {
                            "id": "s1",
                            "question": "Where is Paris?",
                            "answers": [{"text": "France", "answer_start": 12}],
                        }
                    ],
                }
            ],
        }
    ],
}
MRQA_LINES = [
    {"header": {"dataset": "X"}},
    {
        "context": "Paris is in France.",
        "qas": [
            {
                "id": "m1",
                "question": "Where is Paris?",
                "answers": ["France"],
                "detected_answers": [{"text": "France", "char_spans": [[12, 17]]}],
            }
        ],
    },
]
DROP_DOC = {"nfl_1": {"passage": "Ten points.", "qa_pairs": [{"question": "How many?"}]}}


def write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def mrqa_text() -> str:
    return "\n".join(json.dumps(line) for line in MRQA_LINES) + "\n"


def test_registry_names() -> None:
    assert {"squad", "mrqa"} <= set(READERS)
    assert get_reader("squad") is read_squad


def test_unknown_format_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown data format 'squad3'.*mrqa, squad"):
        get_reader("squad3")


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "A.JSONL"])
def test_jsonl_extension_means_mrqa(tmp_path: Path, name: str) -> None:
    assert detect_format(write(tmp_path / name, mrqa_text())) == "mrqa"


@pytest.mark.parametrize("name", ["a.json", "a.json.gz"])
def test_squad_json_detected_by_content(tmp_path: Path, name: str) -> None:
    assert detect_format(write(tmp_path / name, json.dumps(SQUAD_DOC))) == "squad"


def test_mrqa_header_detected_without_the_extension(tmp_path: Path) -> None:
    path = write(tmp_path / "dev.txt", mrqa_text())
    assert detect_format(path) == "mrqa"
    assert [e.id for e in read_examples(path)] == ["m1"]


def test_read_examples_detects_and_reads(tmp_path: Path) -> None:
    squad = read_examples(write(tmp_path / "s.json", json.dumps(SQUAD_DOC)))
    mrqa = read_examples(write(tmp_path / "m.jsonl", mrqa_text()))
    assert (squad.version, [e.id for e in squad]) == ("1.1", ["s1"])
    assert (mrqa.version, [e.id for e in mrqa]) == ("mrqa", ["m1"])


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.data", json.dumps(SQUAD_DOC))
    assert read_examples(path, format="squad").examples[0].id == "s1"
    with pytest.raises(ValueError, match="known formats"):
        read_examples(path, format="nope")


def test_unregistered_detected_format_is_explained(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delitem(READERS, "drop", raising=False)
    path = write(tmp_path / "drop.json", json.dumps(DROP_DOC))
    assert detect_format(path) == "drop"
    with pytest.raises(
        ValueError, match=r"looks like 'drop' data.*known formats: flat, mrqa, squad"
    ):
        read_examples(path)


def test_undetectable_content_says_what_is_expected(tmp_path: Path) -> None:
    path = write(tmp_path / "x.json", json.dumps({"rows": [1, 2, 3]}))
    with pytest.raises(ValueError, match=r"x\.json: cannot tell.*Expected SQuAD JSON"):
        detect_format(path)


def test_empty_and_non_utf8_files_are_named(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.json", "")
    with pytest.raises(ValueError, match=r"empty\.json: the file is empty"):
        detect_format(empty)
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"data": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.json: not UTF-8"):
        detect_format(latin)
