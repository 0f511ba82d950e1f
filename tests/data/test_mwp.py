"""Word problems as DROP questions: the three formats read (masked numbers put back), a bad
line named, folds that partition, and the written file read by the DROP reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.drop import read_drop
from structqa.data.mwp import (
    folds,
    format_number,
    read_masked_csv,
    read_mawps,
    read_problems,
    read_svamp,
    split_question,
    to_drop_json,
)
from structqa.data.records import DataError


def test_numbers_are_written_as_drop_writes_them():
    assert [format_number(x) for x in (43.0, 0.5, 2.25, 1e6, 7)] == [
        "43",
        "0.5",
        "2.25",
        "1000000",
        "7",
    ]


def test_the_last_sentence_asks():
    body, question = split_question("Joan had 70 shells. She gave 27 away. How many are left ?")
    assert body == "Joan had 70 shells. She gave 27 away." and question == "How many are left ?"


def test_masked_numbers_are_put_back(tmp_path: Path):
    f = tmp_path / "train.csv"
    f.write_text(
        "Question,Numbers,Equation,Answer\n"
        '"Tom has number0 apples and eats number1 . How many are left ?",'
        "7.0 2.0,- number0 number1,5.0\n",
        encoding="utf-8",
    )
    (p,) = read_masked_csv(f)
    assert p.body == "Tom has 7 apples and eats 2 ." and p.question == "How many are left ?"
    assert p.answer == "5"
    f.write_text(
        "Question,Numbers,Equation,Answer\n"
        '"Tom has number0 apples and number3 pears . How many ?",7.0,+ number0 number3,9.0\n',
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"line 2.*Numbers.*number3"):
        read_masked_csv(f)


def test_a_bad_line_is_named(tmp_path: Path):
    f = tmp_path / "mawps.jsonl"
    good = {"input": "Ann has 3 cats. How many cats ?", "target": 3.0, "type": "singleop", "idx": 0}
    f.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2"):
        read_mawps(f)
    f.write_text(json.dumps({**good, "target": "three"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1.*target"):
        read_mawps(f)
    s = tmp_path / "svamp.json"
    s.write_text(json.dumps([{"ID": "x", "Body": "B", "Question": "Q?"}]), encoding="utf-8")
    with pytest.raises(DataError, match=r"\[0\] \(x\).*Answer"):
        read_svamp(s)
    with pytest.raises(ValueError, match="not a word-problem file"):
        read_problems(tmp_path / "problems.txt")


def test_the_shared_files_read_and_folds_partition(shared_data: Path, tmp_path: Path, capsys):
    mawps = read_problems(shared_data / "mwp" / "mawps.jsonl")
    assert len(mawps) == 2065 and {p.subset for p in mawps} == {
        "addsub",
        "singleop",
        "singleeq",
        "multiarith",
    }
    svamp = read_problems(shared_data / "mwp" / "svamp.json")
    train = read_problems(shared_data / "mwp" / "mawps-asdiv-a-train.csv")
    assert len(svamp) == 1000 and len(train) == 3138
    assert not any("number0" in p.body + p.question for p in train)
    parts = folds(mawps, 5, seed=0)
    ids = [p.id for part in parts for p in part]
    assert sorted(ids) == sorted(p.id for p in mawps) and len(set(ids)) == len(ids)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    out = tmp_path / "folds"
    assert (
        main(["mwp", str(shared_data / "mwp" / "mawps.jsonl"), "--out", str(out), "--folds", "5"])
        == 0
    )
    test0 = read_drop(out / "fold0-test.json")
    train0 = read_drop(out / "fold0-train.json")
    assert len(test0) + len(train0) == 2065
    assert not {e.id for e in test0} & {e.id for e in train0}
    held = tmp_path / "folds-dev"
    argv = ["mwp", str(shared_data / "mwp" / "mawps.jsonl"), "--out", str(held), "--folds", "5"]
    assert main([*argv, "--dev", "0.1"]) == 0
    dev0, train0_dev = read_drop(held / "fold0-dev.json"), read_drop(held / "fold0-train.json")
    assert len(dev0) == round(0.1 * len(train0)) and len(dev0) + len(train0_dev) == len(train0)
    assert {e.id for e in dev0} | {e.id for e in train0_dev} == {e.id for e in train0}
    assert len(read_drop(held / "fold0-test.json")) == len(test0)
    assert main([*argv, "--dev", "1.5"]) != 0
    assert "between 0 and 1" in capsys.readouterr().err
    assert (
        main(
            [
                "mwp",
                str(shared_data / "mwp" / "svamp.json"),
                "--out",
                str(held / "x.json"),
                "--dev",
                "0.1",
            ]
        )
        != 0
    )
    assert "add --folds K" in capsys.readouterr().err
    doc = to_drop_json(svamp[:2])
    (first,) = doc[svamp[0].id]["qa_pairs"]
    assert first["answer"]["number"] == svamp[0].answer
