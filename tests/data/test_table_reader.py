"""Question-answer tables (CSV/TSV, as a spreadsheet or Kaggle writes them): detected by name,
read with unanswerables, answers located with or without a start, bad rows named by file,
line and field."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.readers import detect_format, read_examples, read_extractive
from structqa.data.records import Answer, DataError
from structqa.data.table import read_table

CONTEXT = "Bees make honey in hives. Honey keeps."
ROWS = [
    ["id", "title", "context", "question", "answer", "answer_start"],
    ["a1", "Bees", CONTEXT, "What do bees make?", "honey", "10"],
    ["a2", "Bees", CONTEXT, "Where, then?", "hives", ""],  # no start: first occurrence
    ["a3", "Bees", CONTEXT, "Who keeps bees?", "", ""],  # unanswerable
]


def write(path: Path, rows: list[list[str]], delimiter: str = ",") -> Path:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(buffer.getvalue().encode()))
    else:
        path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "delimiter"),
    [("own.csv", ","), ("own.csv.gz", ","), ("own.tsv", "\t"), ("excel.csv", ";")],
)
def test_a_table_is_detected_and_read_with_unanswerables(
    tmp_path: Path, name: str, delimiter: str
) -> None:
    path = write(tmp_path / name, ROWS, delimiter)
    assert detect_format(path) == "table"
    data = read_extractive(path)
    assert data.version == "2.0" and data.report.read == 3
    one, two, three = data.examples
    assert one.answers == (Answer("honey", 10),) and one.title == "Bees"
    assert one.question == "What do bees make?" and one.context == CONTEXT
    assert two.answers == (Answer("hives", 19),) and two.question == "Where, then?"
    assert three.is_impossible and three.answers == () and three.gold_texts == ()


def test_kaggle_columns_without_id_or_title(tmp_path: Path) -> None:
    rows = [
        ["context", "question", "answer_text", "answer_start", "language"],
        [CONTEXT, "What do bees make?", " honey ", "10", "english"],
        [CONTEXT, "What keeps?", "Honey", ""],
    ]
    rows[2].append("english")
    data = read_examples(write(tmp_path / "train.csv", rows))
    assert data.version == "1.1" and [e.id for e in data.examples] == ["row-2", "row-3"]
    assert data.examples[0].answers == (Answer("honey", 10),)  # stray spaces trimmed
    assert data.examples[1].answers == (Answer("Honey", 26),)


def test_an_answer_twice_without_a_start_is_noted_and_one_missing_kept_for_scoring(
    tmp_path: Path,
) -> None:
    twice = "Bees sting. Bees fly."
    rows = [
        ["id", "context", "question", "answer"],
        ["t", twice, "Who flies?", "Bees"],
        ["m", twice, "Who swims?", "fish"],
    ]
    data = read_table(write(tmp_path / "own.csv", rows))
    assert data.examples[0].answers == (Answer("Bees", 0),)
    assert data.examples[1].answers == () and data.examples[1].gold_texts == ("fish",)
    assert data.report.warnings["answer_start_ambiguous"] == 1
    assert data.report.warnings["answer_not_in_context"] == 1


def test_a_quoted_cell_may_hold_commas_quotes_and_line_breaks(tmp_path: Path) -> None:
    context = 'He said "stop, now".\nThen he left.'
    rows = [["id", "context", "question", "answer"], ["q", context, "What then?", "he left"]]
    path = write(tmp_path / "own.csv", rows)
    (example,) = read_table(path).examples
    assert example.context == context and example.answers == (Answer("he left", 26),)


def test_a_wrong_start_is_repaired_as_for_squad(tmp_path: Path) -> None:
    rows = [ROWS[0], ["a1", "Bees", CONTEXT, "What?", "honey", "12"]]
    data = read_table(write(tmp_path / "own.csv", rows))
    assert data.examples[0].answers == (Answer("honey", 10),)
    assert data.report.warnings["answer_start_repaired"] == 1


@pytest.mark.parametrize(
    ("rows", "where", "field", "says"),
    [
        (
            [["id", "context", "query", "answer"], ["q", CONTEXT, "?", "x"]],
            "line 1",
            "(header)",
            "question, context and answer",
        ),
        ([ROWS[0], ["a1", "Bees", CONTEXT, "What?", "honey"]], "line 2", "(row)", "5 cells for 6"),
        (
            [ROWS[0], ["a1", "Bees", CONTEXT, "What?", "honey", "ten"]],
            "a1 (line 2)",
            "answer_start",
            "not a whole number",
        ),
        ([ROWS[0], ROWS[1], ROWS[1]], "a1 (line 3)", "id", "a1"),
        ([ROWS[0], ["", "Bees", CONTEXT, "What?", "honey", "10"]], "line 2", "id", "empty id"),
        (
            [["id", "context", "question", "answer", "Context"], ["q", "a", "b", "c", "d"]],
            "line 1",
            "(header)",
            "context appear more than once",
        ),
        (
            [["context", "question", "answer", "answer_text"], ["a", "b", "", "a"]],
            "line 1",
            "(header)",
            "answer appear more than once",
        ),
    ],
)
def test_a_bad_row_is_named_by_file_line_and_field(
    tmp_path: Path, rows: list[list[str]], where: str, field: str, says: str
) -> None:
    path = write(tmp_path / "bad.csv", rows)
    with pytest.raises(DataError) as err:
        read_table(path)
    text = str(err.value)
    assert str(path) in text and where in text and field in text and says in text


@pytest.mark.parametrize("bad_line", [2, 2500])
def test_a_file_not_in_utf8_names_the_line_and_says_how_to_save_it(
    tmp_path: Path, bad_line: int
) -> None:
    """A text reader decodes in blocks: its error named the block's first line, or none."""
    rows = ["context,question,answer\n"] + ["Bees make honey.,What?,honey\n"] * 3000
    rows[bad_line - 1] = "Caf\xe9 au lait.,What?,lait\n"
    path = tmp_path / "latin.csv.GZ"  # (a capital .GZ is gzip too)
    path.write_bytes(gzip.compress("".join(rows).encode("latin-1")))
    with pytest.raises(DataError, match="CSV UTF-8") as err:
        read_table(path)
    assert f"'line {bad_line}'" in str(err.value) and "0xe9" in str(err.value)


def test_a_cell_keeps_its_windows_line_breaks_and_a_long_passage_is_read(tmp_path: Path) -> None:
    """Without newline="" every \\r\\n in a cell became \\n, moving the answers after it."""
    context = "Line one.\r\n" * 25 + "Bees make honey." + " More." * 25000
    start = context.index("honey")
    rows = [["id", "context", "question", "answer", "answer_start"]]
    rows.append(["q", context, "What?", "honey", str(start)])
    (example,) = read_table(write(tmp_path / "own.csv", rows)).examples
    assert example.context == context and example.answers == (Answer("honey", start),)


def test_a_spreadsheets_whole_float_start_is_an_offset(tmp_path: Path) -> None:
    """pandas writes an integer column with empty cells as 10.0."""
    rows = [ROWS[0], ["a1", "Bees", CONTEXT, "What?", "honey", "10.0"], ROWS[3]]
    data = read_table(write(tmp_path / "own.csv", rows))
    assert data.examples[0].answers == (Answer("honey", 10),) and not data.report.warnings
    rows[1][-1] = "10.5"
    with pytest.raises(DataError, match="not a whole number"):
        read_table(write(tmp_path / "own.csv", rows))


def test_without_a_start_a_whole_word_is_preferred(tmp_path: Path) -> None:
    rows = [
        ["id", "context", "question", "answer"],
        ["n", "In 2010 the hive held 10 queens.", "How many?", "10"],
        ["w", "The hive is warm.", "Who?", "he"],
    ]
    data = read_table(write(tmp_path / "own.csv", rows))
    assert data.examples[0].answers == (Answer("10", 22),)
    assert data.examples[1].answers == (Answer("he", 1),)
    assert data.report.warnings == {"answer_inside_word": 1}


def test_score_reads_a_table_as_squad2_when_it_has_unanswerables(tmp_path: Path) -> None:
    from structqa.scoring import load_gold, score_file

    path = write(tmp_path / "own.csv", ROWS)
    assert load_gold(path) == ("squad2", {"a1": ["honey"], "a2": ["hives"], "a3": []})
    preds = tmp_path / "predictions.json"
    preds.write_text('{"a1": "honey", "a2": "bees", "a3": ""}')
    scores = score_file(path, preds)
    assert scores["exact"] == pytest.approx(200 / 3) and scores["total"] == 3


def as_table(source: Path, out: Path) -> Path:
    """A SQuAD file's questions as the spreadsheet a user would keep (first answer only)."""
    rows = [["id", "title", "context", "question", "answer", "answer_start"]]
    for ex in read_extractive(source).examples:
        first = ex.answers[0]
        rows.append([ex.id, ex.title, ex.context, ex.question, first.text, str(first.start)])
    return write(out, rows)


def test_own_table_trains_evaluates_and_scores(tmp_path: Path, tiny_checkpoint, capsys) -> None:
    """The README's own-data path with the questions kept as CSV: train (best/ chosen on a
    slice of the table), evaluate on the test table, and score its answers officially."""
    own = Path(__file__).resolve().parent / "files" / "own-data"
    train = as_table(own / "bees-train.json", tmp_path / "train.csv")
    test = as_table(own / "bees-test.json", tmp_path / "test.csv")
    out = tmp_path / "run"
    args = [
        "train",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.train={train}",
        "--data.train_size=all",
        f"--train.output_dir={out}",
        "--train.max_steps=2",
        "--train.bf16=off",
        "--no-progress",
    ]
    assert main(args) == 0
    capsys.readouterr()
    ev = ["evaluate", str(out / "best"), "--eval", str(test), "--bf16", "off"]
    assert main([*ev, "--out", str(tmp_path / "test")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    answers = tmp_path / "test" / "predictions.json"
    assert len(json.loads(answers.read_text())) == 15
    assert main(["score", str(test), str(answers)]) == 0
    official = {k: metrics[k] for k in ("exact_match", "f1")}
    assert json.loads(capsys.readouterr().out) == pytest.approx(official)
