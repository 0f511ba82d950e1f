"""Damaged dataset files end in a DataError naming file, record and field, never a traceback:
corrupt or cut-short gzip, JSON nested past the parser's recursion, invalid Unicode (lone
surrogates, NUL); an unknown declared version is read with a warning."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from structqa.data.drop import read_drop
from structqa.data.hygiene import InvalidText, check_text, text_problem
from structqa.data.mrqa import read_mrqa
from structqa.data.readers import read_examples
from structqa.data.records import DataError
from structqa.data.squad import read_squad

CONTEXT = "The cat sat on the mat."
DEEP = 100_000  # far past Python's recursion limit (1000)


def squad_doc(question: str = "Who sat?", context: str = CONTEXT, **top) -> dict:
    qa = {"id": "q1", "question": question, "answers": [{"text": "The cat", "answer_start": 0}]}
    return {"data": [{"title": "T", "paragraphs": [{"context": context, "qas": [qa]}]}], **top}


def mrqa_lines(question: str = "Who sat?", context: str = CONTEXT) -> str:
    qa = {
        "qid": "q1",
        "question": question,
        "answers": ["The cat"],
        "detected_answers": [{"text": "The cat", "char_spans": [[0, 6]]}],
    }
    header = {"header": {"dataset": "T", "split": "dev"}}
    return "\n".join(json.dumps(x) for x in (header, {"context": context, "qas": [qa]})) + "\n"


def cut_gzip(path: Path, payload: bytes) -> Path:
    whole = gzip.compress(payload)
    path.write_bytes(whole[: len(whole) // 2])
    return path


@pytest.mark.parametrize("name", ["cut.json.gz", "cut.jsonl.gz"])
def test_a_cut_short_gzip_is_a_data_error(tmp_path, name):
    payload = (json.dumps(squad_doc()) if name.endswith(".json.gz") else mrqa_lines()) * 200
    path = cut_gzip(tmp_path / name, payload.encode())
    with pytest.raises(DataError, match=r"cut\.jsonl?\.gz.*compressed data cut short"):
        read_examples(path)


def test_a_gzip_that_is_not_gzip_is_a_data_error(tmp_path):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(b"this is not gzip at all")
    with pytest.raises(DataError, match=r"bad\.json\.gz.*unreadable file"):
        read_examples(path)


def test_json_nested_past_the_recursion_limit_is_a_data_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"data": ' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(DataError, match=r"deep\.json.*nested too deeply"):
        read_squad(path)
    with pytest.raises(DataError, match="nested too deeply"):
        read_drop(path)
    lines = tmp_path / "deep.jsonl"
    lines.write_text(mrqa_lines() + '{"context": ' + "[" * DEEP + "]" * DEEP + "}\n")
    with pytest.raises(DataError, match=r"record 'line 3'.*nested too deeply"):
        read_mrqa(lines)


@pytest.mark.parametrize(
    ("question", "context", "squad_record", "mrqa_record", "field"),
    [
        ("Who \ud800 sat?", CONTEXT, "q1", r"q1 \(line 2\)", "question"),
        (
            "Who sat?",
            "The cat sat\x00 on the mat.",
            r"data\[0\]\.paragraphs\[0\]",
            "line 2",
            "context",
        ),
    ],
)
def test_invalid_unicode_in_a_record_is_a_data_error_naming_it(
    tmp_path, question, context, squad_record, mrqa_record, field
):
    # json.dumps writes a lone surrogate as the escape \ud800, as a damaged file would hold it
    squad = tmp_path / "bad.json"
    squad.write_text(json.dumps(squad_doc(question, context)))
    with pytest.raises(DataError, match=rf"record '{squad_record}', field '{field}': contains a"):
        read_squad(squad)
    mrqa = tmp_path / "bad.jsonl"
    mrqa.write_text(mrqa_lines(question, context))
    with pytest.raises(DataError, match=rf"record '{mrqa_record}', field '{field}': contains a"):
        read_mrqa(mrqa)


def test_invalid_unicode_in_drop_is_a_data_error_naming_the_record(tmp_path):
    qa = {"query_id": "d1", "question": "How many?\ud83d", "answer": {"number": "2"}}
    path = tmp_path / "drop.json"
    path.write_text(json.dumps({"p1": {"passage": "Two cats.", "qa_pairs": [qa]}}))
    with pytest.raises(DataError, match=r"'d1 \(passage p1\)', field 'question'.*U\+D83D"):
        read_drop(path)


def test_the_text_rule():
    assert text_problem("naïve café, 東京 😀") is None  # real non-ASCII text is fine
    assert "lone surrogate U+DC80 at offset 2" in text_problem("ab\udc80")
    assert "NUL character (U+0000) at offset 0" in text_problem("\x00x")
    with pytest.raises(InvalidText, match="the question contains a lone surrogate"):
        check_text("\ud800", "the question")


def test_an_unknown_version_is_read_with_a_warning_naming_it(tmp_path, caplog):
    path = tmp_path / "v73.json"
    path.write_text(json.dumps(squad_doc(version="7.3")))
    with caplog.at_level(logging.WARNING, logger="structqa.data"):
        ds = read_squad(path)
    assert len(ds) == 1 and ds.version == "1.1"
    assert ds.report.warnings["unknown_version"] == 1
    assert "declares version '7.3'" in caplog.text
    assert "read as SQuAD v1.1 (no is_impossible fields)" in caplog.text
    caplog.clear()
    for known in ("1.1", "v2.0"):
        path.write_text(json.dumps(squad_doc(version=known)))
        with caplog.at_level(logging.WARNING, logger="structqa.data"):
            read_squad(path)
        assert "declares version" not in caplog.text


def test_score_reports_deep_or_cut_files_with_exit_2(tmp_path, capsys):
    from structqa.cli import main

    data = tmp_path / "data.json"
    data.write_text(json.dumps(squad_doc(version="1.1")))
    deep = tmp_path / "preds.json"
    deep.write_text('{"q1": ' + "[" * DEEP + "]" * DEEP + "}")
    assert main(["score", str(data), str(deep)]) == 2
    assert "preds.json: the predictions file's JSON is nested too deeply" in capsys.readouterr().err
    cut = cut_gzip(tmp_path / "data.json.gz", json.dumps(squad_doc()).encode() * 50)
    preds = tmp_path / "ok.json"
    preds.write_text('{"q1": "The cat"}')
    assert main(["score", str(cut), str(preds)]) == 2
    assert "data.json.gz: the dataset file is not valid gzip" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("what", "name"),
    [("dataset", "data.json"), ("predictions", "preds.json"), ("predictions", "preds.json.gz")],
)
def test_score_names_the_line_of_a_byte_that_is_not_utf8(tmp_path, capsys, what, name):
    """A latin-1 file (an editor's default) was "not valid JSON ('utf-8' codec can't decode
    byte 0xe9 in position 4: ...)": now its line and byte and what to do, as the readers say."""
    from structqa.cli import main

    files = {"dataset": tmp_path / "data.json", "predictions": tmp_path / "preds.json"}
    files[what] = tmp_path / name
    files["dataset"].write_text(json.dumps(squad_doc(version="1.1")))
    files["predictions"].write_text('{"q1": "The cat"}')
    raw = b'{\n  \xe9"q1": "The cat"}'
    files[what].write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    assert main(["score", str(files["dataset"]), str(files["predictions"])]) == 2
    problem = "line 2: byte 0xe9 at offset 2 of the line is not UTF-8; save the file as UTF-8"
    assert f"{name}: the {what} file, {problem}" in capsys.readouterr().err


def test_a_byte_that_is_not_utf8_is_named_on_its_own_line(tmp_path: Path) -> None:
    """Decoded in blocks, a stray byte deep in a JSON-lines file was named at the first line of
    its block (line 1 for a byte on line 2): each line is now decoded alone."""
    header, record = mrqa_lines().splitlines()
    lines = [header] + [record.replace('"q1"', f'"q{i}"') for i in range(300)]
    raw = "\n".join(lines).encode()
    at = raw.index(b"The cat sat", len("\n".join(lines[:250])))  # in line 251's context
    bad = raw[:at] + b"\xe9" + raw[at:]
    for name, data in (("dev.jsonl", bad), ("dev.jsonl.gz", gzip.compress(bad))):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(DataError, match=r"record 'line 251'.*save the file as UTF-8") as err:
            read_mrqa(path)
        assert err.value.field_name == "(file)"
