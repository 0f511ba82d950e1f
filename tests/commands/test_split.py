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
