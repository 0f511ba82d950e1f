"""A folder as users have them: links (to folders, back up, to nothing), sub-folders that
cannot be listed, files that make a reader fail in ways of its own, a stray byte in a QA
file, a PDF behind a password, an index asked to live among its documents; and an index
whose BM25 folder a crash left mid-swap."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_documents import pdf_bytes

from structqa.cli import main
from structqa.data.readers import read_examples
from structqa.data.records import DataError
from structqa.documents import DocumentIndex, ingest
from structqa.documents.folders import files_under
from structqa.documents.index import INDEX_FILE
from structqa.documents.ingest import ReadReport, read_all, read_documents
from structqa.documents.textfiles import Unreadable


def test_links_are_followed_once_and_a_link_to_nothing_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    (shared / "old").mkdir(parents=True)
    (shared / "notes.txt").write_text("Shared notes.", encoding="utf-8")
    record = {"encoder": "MiniLM", "chunk_tokens": 254, "chunks": 0, "files": 0}
    (shared / "old" / "index.json").write_text(json.dumps(record), encoding="utf-8")  # an index
    (shared / "old" / "chunks.sqlite").write_bytes(b"")
    (tmp_path / "secret.txt").write_text("Not the folder's.", encoding="utf-8")
    docs = tmp_path / "docs"
    (docs / "reports").mkdir(parents=True)
    (docs / "a.txt").write_text("A.", encoding="utf-8")
    (docs / "reports" / "q1.txt").write_text("Q1.", encoding="utf-8")
    (docs / "linked").symlink_to(shared)  # a folder kept elsewhere: read through its link
    (docs / "also").symlink_to(shared)  # a second link to it: read once
    (docs / "current").symlink_to(docs / "reports")  # within: read where the files are
    (docs / "up").symlink_to(docs)  # back up to the folder itself
    (docs / "parent").symlink_to(tmp_path)  # above it: not the folder's to read
    (docs / "gone.txt").symlink_to(tmp_path / "unmounted" / "gone.txt")
    (docs / "loop.txt").symlink_to("loop.txt")  # a link to itself
    (docs / ".releases" / "v3").mkdir(parents=True)  # hidden: read only through its link
    (docs / ".releases" / "v3" / "notes.md").write_text("Release notes.", encoding="utf-8")
    (docs / "release").symlink_to(docs / ".releases" / "v3")
    (docs / "null.txt").symlink_to(os.devnull)  # there, but not a file: left out, unnamed
    skipped: list[tuple[str, str]] = []
    found = files_under([docs], exclude=[tmp_path / "index"], skipped=skipped)
    assert found == [
        docs / "a.txt",
        docs / "also" / "notes.txt",
        docs / "release" / "notes.md",
        docs / "reports" / "q1.txt",
    ]
    reasons = dict(skipped)
    assert set(reasons) == {str(docs / "gone.txt"), str(docs / "loop.txt")}
    assert "which does not exist" in reasons[str(docs / "gone.txt")]
    assert "leads round in a loop" in reasons[str(docs / "loop.txt")]
    with pytest.raises(FileNotFoundError, match="a link to"):
        files_under([docs / "gone.txt"])  # given by name: the run stops, saying why
    out = tmp_path / "cli-index"
    assert main(["index", str(docs / "gone.txt"), "--out", str(out), "--no-progress"]) == 2
    assert "which does not exist" in capsys.readouterr().err and not out.exists()


def test_an_unlistable_folder_is_named_and_what_it_held_stays_indexed(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = small / "private"
    private.mkdir()
    (private / "sahara.txt").write_text("The Sahara is a large desert in Africa.", "utf-8")
    out = tmp_path / "index"
    assert DocumentIndex(out, create=True).update([small]).added_files == 3
    scandir = os.scandir

    def unlistable(path: object = ".") -> object:  # what a folder without read rights does
        if isinstance(path, str | Path) and Path(path) == private:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", unlistable)
    with DocumentIndex(out) as index:
        report = index.update([small])
        assert report.removed_files == 0 and report.unchanged_files == 2
        ((name, why),) = report.read.skipped
        assert name == str(private) and "cannot be listed (Permission denied)" in why
        assert "kept" in why
        assert index.search("desert Sahara", 1, "bm25")[0].source == str(private / "sahara.txt")


def test_a_reader_failing_on_one_file_costs_that_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = tmp_path / "offer.html"  # the standard library's parser gives up on it
    section.write_text("<p>Price <![ special offer ]]> today</p>", encoding="utf-8")
    hexed = tmp_path / "hexed.html"  # a bytes-to-bytes codec named as the charset
    hexed.write_text('<meta charset="hex"><p>Bees dance.</p>', encoding="utf-8")
    odd = tmp_path / "odd.txt"
    odd.write_text("Odd.", encoding="utf-8")
    good = tmp_path / "good.txt"
    good.write_text("Good.", encoding="utf-8")
    real = ingest.read_documents

    def failing(path: Path, notes: list[str] | None = None) -> list[ingest.Document]:
        if path == odd:  # a reader's own failure, of a kind nothing expected
            raise RuntimeError("the reader tripped")
        return real(path, notes)

    monkeypatch.setattr(ingest, "read_documents", failing)
    report = ReadReport()
    read = {p.name: docs for p, docs in read_all([section, hexed, odd, good], report)}
    assert sorted(read) == ["good.txt", "hexed.html"]
    assert read["hexed.html"][0].text == "Bees dance."
    reasons = dict(report.skipped)
    assert "HTML the parser cannot read" in reasons[str(section)]
    assert "RuntimeError: the reader tripped" in reasons[str(odd)]


def test_a_stray_byte_in_a_qa_file_costs_no_passage(tmp_path: Path) -> None:
    header = {"header": {"dataset": "SQuAD", "split": "dev"}}
    records = [
        {"context": f"Passage {i} about bees.", "qas": [{"qid": str(i), "question": "Q?"}]}
        for i in range(4)
    ]
    lines = [json.dumps(r).encode() for r in [header, *records]]
    lines[3] = lines[3].replace(b"about", b"about caf\xe9")  # Latin-1 in a UTF-8 file
    path = tmp_path / "dev.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    notes: list[str] = []
    docs = read_documents(path, notes)
    assert len(docs) == 4
    assert "caf\ufffd" in docs[2].text
    (note,) = notes
    assert "1 line(s) not valid UTF-8" in note and "(lines 4)" in note


def test_flat_records_and_old_mac_line_ends(tmp_path: Path) -> None:
    """A stray byte near the top of Hugging Face's SQuAD lines once lost the file (its kind
    was told by decoding the head as text); lines ended by a lone CR were one line."""
    record = {
        "id": "1",
        "title": "Bees",
        "context": "Bees dance.",
        "question": "What do bees do?",
        "answers": {"text": ["dance"], "answer_start": [5]},
    }
    lines = [json.dumps({**record, "id": str(i), "context": f"Bees dance {i}."}) for i in range(3)]
    raw = "\n".join(lines).encode().replace(b"dance 1", b"dance\xe9 1")
    flat = tmp_path / "train.jsonl"
    flat.write_bytes(raw)
    notes: list[str] = []
    assert len(read_documents(flat, notes)) == 3
    assert "(lines 2)" in notes[0]
    with pytest.raises(DataError, match="record 'line 2'"):
        read_examples(flat)  # training names the line; it never guesses a character
    mac = tmp_path / "mac.jsonl"
    header = json.dumps({"header": {"dataset": "x"}})
    body = [json.dumps({"context": f"Passage {i}.", "qas": []}) for i in range(3)]
    mac.write_bytes("\r".join([header, *body]).encode())
    assert len(read_documents(mac)) == 3
    flat_mac = tmp_path / "flat-mac.jsonl"  # told apart from MRQA by its first line alone
    flat_mac.write_bytes("\r".join(lines).encode().replace(b"\xe9", b""))
    assert len(read_examples(flat_mac).examples) == 3


def test_a_password_protected_pdf_says_so(tmp_path: Path) -> None:
    from io import BytesIO

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(BytesIO(pdf_bytes(["A secret about bees."]))))
    writer.encrypt("open sesame", algorithm="RC4-128")
    path = tmp_path / "secret.pdf"
    with path.open("wb") as f:
        writer.write(f)
    with pytest.raises(Unreadable, match="password-protected"):
        read_documents(path)


def test_an_index_is_not_made_among_its_documents(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for out in (small, small.parent):
        assert main(["index", str(small), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"--out {out} holds {small}" in err and "docs-index" in err
        assert not (out / INDEX_FILE).exists() and not (out / "chunks.sqlite").exists()


def test_bm25_left_mid_swap_by_a_crash_is_put_back(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "index"
    DocumentIndex(out, create=True).update([small])
    assert not (out / "bm25.tmp").exists()
    (out / "bm25").rename(out / "bm25.old")  # the crash: between replace_dir's two renames
    with DocumentIndex.open(out) as index:  # read where it lies: an update may be under way
        assert index.search("volcano Etna", 1, "bm25")[0].source == str(small / "etna.txt")
    assert not (out / "bm25").exists()
    (small / "bees.txt").write_text("Bumblebees sleep in flowers at night.", encoding="utf-8")
    with DocumentIndex(out) as index:  # the next update writes it whole, the old one gone
        index.update([small])
        assert index.search("bumblebees", 1, "bm25")[0].source == str(small / "bees.txt")
    assert (out / "bm25").is_dir() and not (out / "bm25.old").exists()


def test_a_file_moved_while_the_readers_changed_is_read_again(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "index"
    DocumentIndex(out, create=True).update([small])
    meta = json.loads((out / INDEX_FILE).read_text())
    (out / INDEX_FILE).write_text(json.dumps({**meta, "readers": 1}))  # made by older readers
    (small / "bees.txt").rename(small / "honeybees.txt")
    with DocumentIndex(out) as index:
        report = index.update([small])
        assert report.moved_files == 0 and report.added_files == 2  # both read again
        assert index.search("bees", 1, "bm25")[0].source == str(small / "honeybees.txt")
