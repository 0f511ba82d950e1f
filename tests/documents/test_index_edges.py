"""An index's folder and the files it is given, past the happy path: names that are not
UTF-8, files emptied since the last update, a folder of other files given as the index, a
damaged vector file, types no reader reads, and the questions of the Python ``ask``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_documents import BEES

from structqa.cli import main
from structqa.documents import DocumentIndex
from structqa.documents import index as index_module
from structqa.documents.folders import files_under


def _index(paths: list[Path], out: Path) -> None:
    """``structqa index PATHS --out OUT``, as a user runs it."""
    assert main(["index", *map(str, paths), "--out", str(out), "--no-progress"]) == 0


def test_a_name_that_is_not_utf8_is_skipped_and_shown_with_its_bytes(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = os.fsencode(small)
    with open(folder + b"/caf\xe9.txt", "wb") as f:  # a Latin-1 name: Python sees \udce9
        f.write(b"Coffee is brewed from roasted beans.")
    os.mkdir(folder + b"/r\xe9sum\xe9s")
    with open(folder + b"/r\xe9sum\xe9s/cv.txt", "wb") as f:
        f.write(b"A summary of a career.")
    out = tmp_path / "index"
    _index([small], out)
    printed, err = capsys.readouterr()
    assert "2 files read" in printed
    assert f"warning: skipped {small}/caf\\xe9.txt: a name that is not valid UTF-8" in err
    assert f"warning: skipped {small}/r\\xe9sum\\xe9s: a folder whose name is not valid" in err
    assert "rename it" in err
    assert not (out / "updating").exists()
    with DocumentIndex.open(out) as index:
        assert index.search("waggle dance", k=1, retriever="bm25")[0].source.endswith("bees.txt")
    skipped: list[tuple[str, str]] = []  # a name given as a PATH, too
    assert files_under([Path(os.fsdecode(folder + b"/caf\xe9.txt"))], skipped=skipped) == []
    assert skipped[0][0] == f"{small}/caf\\xe9.txt"


def test_a_file_emptied_since_the_last_update_loses_its_chunks(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "index"
    _index([small], out)
    (small / "bees.txt").write_text("  \n\t \n", encoding="utf-8")  # whitespace only
    (small / "new.txt").write_bytes(b"")
    capsys.readouterr()
    _index([small], out)
    err = capsys.readouterr().err
    assert (
        f"skipped {small / 'bees.txt'}: empty file; its chunks indexed earlier are dropped" in err
    )
    assert f"skipped {small / 'new.txt'}: empty file\n" in err
    with DocumentIndex.open(out) as index:
        assert not index.search("waggle dance of honey bees", k=5, retriever="bm25")
        assert len(index) == len(index.dense) == 1  # Etna's chunk alone
        recorded = dict(index.db.execute("select path, sha256 from files"))
    assert recorded[str(small / "bees.txt")] == index_module.file_sha256(small / "bees.txt")
    again = DocumentIndex.open(out).update([small])
    assert (again.unchanged_files, again.added_files, again.read.skipped) == (3, 0, [])
    (small / "bees.txt").write_text(BEES, encoding="utf-8")  # filled again: indexed again
    with DocumentIndex.open(out) as index:
        assert index.update([small]).added_files == 1
        assert index.search("waggle dance", k=1, retriever="bm25")[0].source.endswith("bees.txt")


def test_an_out_folder_that_is_not_an_index_is_refused_before_anything_is_written(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"  # a web site's folder, with an index.json of its own
    site.mkdir()
    (site / "index.json").write_text('{"title": "my site", "pages": 3}', encoding="utf-8")
    (site / "about.html").write_text("<p>About</p>", encoding="utf-8")
    notes = tmp_path / "notes"  # a folder of other files
    notes.mkdir()
    (notes / "todo.md").write_text("buy milk", encoding="utf-8")
    for folder, held in [(site, ["about.html", "index.json"]), (notes, ["todo.md"])]:
        assert main(["index", str(small), "--out", str(folder), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"{folder}: not a document index" in err and "new or empty folder" in err
        assert sorted(p.name for p in folder.iterdir()) == held  # nothing written there
    (site / "about.html").unlink()  # an index.json of another program's alone: not an index
    assert main(["index", str(small), "--out", str(site), "--no-progress"]) == 2
    assert "its index.json is not a document index's" in capsys.readouterr().err
    assert main(["search", str(site), "--query", "bees"]) == 2  # nor read as one
    assert f"{site}: not a document index" in capsys.readouterr().err
    assert [p.name for p in site.iterdir()] == ["index.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    _index([small], empty)  # an empty folder is a new index's
    _index([small], empty)  # and an index is updated
    assert "2 unchanged" in capsys.readouterr().out


def test_the_python_api_opens_an_index_and_builds_one_only_when_asked(
    small: Path, tmp_path: Path
) -> None:
    typo = tmp_path / "my-indx"
    with pytest.raises(FileNotFoundError, match="not a document index") as refused:
        DocumentIndex(typo)
    said = str(refused.value)
    assert str(typo) in said and f"--out {typo}" in said and "create=True" in said
    assert not typo.exists()  # no empty index made where a name was mistyped
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ValueError, match="new or empty folder"):
        DocumentIndex(tmp_path / "other", create=True)
    with DocumentIndex(tmp_path / "made", create=True) as index:
        assert index.update([small]).added_files == 2
    with DocumentIndex(tmp_path / "made") as index:  # then opened as the documented way
        assert index.search("volcano in Sicily", k=1)[0].source.endswith("etna.txt")


def test_a_damaged_vector_file_is_an_error_that_says_how_to_rebuild(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "index"
    _index([small], out)
    vectors = out / "dense.faiss"
    vectors.write_bytes(vectors.read_bytes()[:40])  # cut short
    capsys.readouterr()
    assert main(["search", str(out), "--query", "bees"]) == 2
    err = capsys.readouterr().err
    assert f"{vectors}: not a readable faiss index" in err
    assert f"structqa index FOLDER --out {out}" in err


def test_the_vector_file_is_written_through_to_disk(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, each file's name noted
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "index"
    _index([small], out)
    assert any(name.startswith(".dense.faiss.") for name in synced), synced
    assert sorted(p.name for p in out.iterdir() if "faiss" in p.name) == ["dense.faiss"]


def test_the_help_says_links_to_folders_outside_are_followed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "reached through a symbolic link, are left out" not in said
    assert "a folder behind a symbolic link outside PATH is read once" in said


def test_a_type_no_reader_reads_is_skipped_unread(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (small / "film.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" * 1000)
    (small / "photos.zip").write_bytes(b"PK\x03\x04" * 1000)
    hashed: list[str] = []
    real = index_module.file_sha256

    def sha256(path: Path) -> str:  # the real hash, each file hashed noted
        hashed.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(index_module, "file_sha256", sha256)
    _index([small], tmp_path / "index")
    assert sorted(hashed) == ["bees.txt", "etna.txt"]
    err = capsys.readouterr().err
    for name, suffix in [("film.mp4", ".mp4"), ("photos.zip", ".zip")]:
        assert f"skipped {small / name}: not a document type read here ({suffix})" in err


def test_the_python_ask_names_the_question_it_refuses(
    small: Path, tmp_path: Path, tiny_trained_run: Path
) -> None:
    from structqa.documents.ask import ask
    from structqa.prediction import InvalidText, Predictor, QuestionTooLong

    out = tmp_path / "index"
    _index([small], out)
    reader = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")
    long = "Why " + "bees " * 200 + "dance?"
    with DocumentIndex.open(out) as index:
        ok = ["Where is Mount Etna?", "What do bees do?"]
        with pytest.raises(QuestionTooLong) as refused:
            ask(index, reader, [*ok, long], top_k_chunks=2)
        assert str(refused.value).startswith("question 2 ('Why bees bees bees")
        assert "pair" not in str(refused.value)
        assert f"more than the {reader.features.max_query_len} this model reads" in str(
            refused.value
        )
        with pytest.raises(InvalidText, match=r"^question 1 \('What\\x00'\): .*NUL"):
            ask(index, reader, [ok[0], "What\x00"], top_k_chunks=2)
        with pytest.raises(ValueError, match=r"^question 1 \(' '\): empty"):
            ask(index, reader, [ok[0], " "], top_k_chunks=2)
        assert len(ask(index, reader, ok, top_k_chunks=2)) == 2
