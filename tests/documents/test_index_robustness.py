"""A user's folder is never all clean: damaged files are skipped and named without ending the
run, an update stopped half-way is redone rather than left with chunks that have no vector,
and mistakes in the command line are errors that say what to do."""

from __future__ import annotations

import gzip
import json
import logging
import random
from pathlib import Path

import pytest
from test_documents import BEES, VOLCANO, pdf_bytes

from structqa.cli import main
from structqa.documents import DocumentIndex
from structqa.documents import index as index_module
from structqa.documents.folders import files_under
from structqa.documents.index import READERS_VERSION
from structqa.documents.ingest import Unreadable, read_documents
from structqa.documents.vectors import FaissStore
from structqa.paths import default_encoder_path


def test_a_pdf_with_a_reference_loop_is_skipped_not_fatal(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two bytes of a valid PDF changed (found by mutating files): pypdf then follows an
    # object into itself and raises its LimitReachedError, which once ended the whole run
    good = pdf_bytes(["The Sahara is a large desert in Africa."])
    bad = good.replace(b"/Type /Catalog", b"/Typ\xa8 /Catalog").replace(b"4 0 obj\n", b"4 0 objQ")
    assert len(bad) == len(good)  # the cross-reference offsets still point where they did
    (small / "loop.pdf").write_bytes(bad)
    report = DocumentIndex(tmp_path / "index", create=True).update([small])
    assert report.added_files == 2
    ((name, why),) = report.read.skipped
    assert name.endswith("loop.pdf") and "not a readable PDF" in why and "re-save" in why
    capsys.readouterr()
    assert main(["index", str(small), "--out", str(tmp_path / "cli"), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "2 files read, 2 documents, 1 skipped" in out
    assert (out + err).count("loop.pdf") == 1  # named once, with its reason, on stderr
    assert "warning: skipped" in err and "re-save" in err


def test_damage_past_a_corpus_head_names_the_file_and_line(small: Path, tmp_path: Path) -> None:
    rng = random.Random(0)  # words that do not compress away, so the damage lies past the head
    records = [
        {
            "_id": f"d{i}",
            "title": "",
            "text": " ".join(f"w{rng.getrandbits(32):x}" for _ in range(60)),
        }
        for i in range(600)
    ]
    raw = "".join(json.dumps(r) + "\n" for r in records).encode()
    assert len(raw) > 1 << 16  # past what is read to recognise the format
    packed = gzip.compress(raw)
    assert len(packed) > 2 << 16
    (small / "cut.corpus.jsonl.gz").write_bytes(packed[: len(packed) // 2])  # truncated
    (small / "latin.corpus.jsonl").write_bytes(raw[:70000] + "é\n".encode("latin-1") + raw[70000:])
    report = DocumentIndex(tmp_path / "index", create=True).update([small])
    # the cut file is skipped, named; a stray byte costs its line, not the corpus of 600
    assert report.added_files == 3
    ((cut_name, cut),) = report.read.skipped
    assert cut_name == str(small / "cut.corpus.jsonl.gz")
    assert "compressed data cut short" in cut and "unreadable after line" in cut
    line = raw[:70000].count(b"\n") + 1  # the line the byte is on, counted exactly
    notes = [what for name, what in report.read.notes if name.endswith("latin.corpus.jsonl")]
    assert any("1 line(s) not valid UTF-8" in n and f"(lines {line})" in n for n in notes)
    assert any("2 line(s) not corpus records" in n for n in notes)  # the record it cut in two


def test_a_file_that_cannot_be_read_is_skipped_and_a_changed_one_keeps_its_old_text(
    small: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "index"
    DocumentIndex(out, create=True).update([small])
    (small / "bees.txt").write_bytes(bytes(range(256)) * 4)  # changed, and no longer text
    secret = small / "secret.txt"
    secret.write_text("Classified.", encoding="utf-8")
    real = index_module.file_sha256

    def denied(path: Path) -> str:  # as root nothing is unreadable: the error is injected
        if path == secret:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(index_module, "file_sha256", denied)
    report = DocumentIndex(out).update([small])
    reasons = dict(report.read.skipped)
    assert "Permission denied" in reasons[str(secret)]
    assert reasons[str(small / "bees.txt")].endswith("the version indexed earlier is kept")
    index = DocumentIndex.open(out)
    assert index.search("waggle dance", k=1, retriever="bm25")[0].source.endswith("bees.txt")
    assert json.loads((out / "index.json").read_text())["files"] == 2  # bees (old) and etna


def test_an_update_stopped_half_way_is_redone_by_the_next(
    small: Path, tmp_path: Path, monkeypatch, caplog
) -> None:
    out = tmp_path / "index"

    def stopped(self) -> None:  # Ctrl-C after the chunks were committed, before the vectors
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(FaissStore, "save", stopped)
        with pytest.raises(KeyboardInterrupt):
            DocumentIndex(out, create=True).update([small])
        with pytest.raises(FileNotFoundError, match="first build stopped before it finished"):
            DocumentIndex.open(out)
    DocumentIndex(out, create=True).update(
        [small]
    )  # built whole; then a change, stopped the same way
    (small / "bees.txt").write_text("Bumblebees sleep in flowers at night.", encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(FaissStore, "save", stopped)
        with pytest.raises(KeyboardInterrupt):
            DocumentIndex(out).update([small])
    with caplog.at_level(logging.WARNING):
        DocumentIndex.open(out).close()
    assert "stopped before it finished" in caplog.text
    report = DocumentIndex(out).update([small])
    # the file it was writing again, not "2 unchanged" with no vectors; etna stays as it was
    assert (report.added_files, report.unchanged_files) == (1, 1)
    index = DocumentIndex.open(out)
    assert len(index.dense) == len(index) == report.chunks
    for query, where in [("where bumblebees sleep", "bees.txt"), ("volcano in Sicily", "etna.txt")]:
        assert index.search(query, k=1, retriever="dense")[0].source.endswith(where)
    assert not (out / "updating").exists()


def test_a_stop_while_embedding_leaves_the_index_as_it_was(
    small: Path, tmp_path: Path, monkeypatch, caplog
) -> None:
    """Ctrl-C while a new file is embedded: the database and the faiss file have not changed
    on disk, so the next update embeds that file alone, not every file again."""
    out = tmp_path / "index"
    DocumentIndex(out, create=True).update([small])
    (small / "sahara.txt").write_text("The Sahara is a large desert in Africa.", encoding="utf-8")

    def stopped(self, ids, vectors) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    stopped_index = DocumentIndex(out)  # kept, as a notebook or a server keeps it
    with monkeypatch.context() as patch:
        patch.setattr(FaissStore, "add", stopped)
        with pytest.raises(KeyboardInterrupt):
            stopped_index.update([small])
    with caplog.at_level(logging.WARNING), DocumentIndex.open(out) as index:
        assert len(index.dense) == len(index) == 2  # whole, as before the update
    assert "stopped before it finished" not in caplog.text
    # the stopped object itself goes on (its database lock let go, its stores read again)
    report = stopped_index.update([small])
    assert (report.added_files, report.unchanged_files) == (1, 2)
    assert len(stopped_index.dense) == len(stopped_index) == 3
    stopped_index.close()
    with DocumentIndex.open(out) as index:
        assert len(index.dense) == len(index) == 3
        assert index.search("a desert in Africa", k=1)[0].source.endswith("sahara.txt")


def test_command_line_mistakes_are_errors_that_say_what_to_do(
    small: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "index"
    # a file given twice (by a folder and by name) is indexed once
    assert files_under([small, small / "bees.txt", small]) == sorted(small.iterdir())
    assert (
        main(["index", str(small), str(small / "bees.txt"), "--out", str(out), "--no-progress"])
        == 0
    )
    assert "2 files read" in capsys.readouterr().out
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    assert main(["index", str(small), "--out", str(a_file), "--no-progress"]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert main(["index", str(tmp_path / "nowhere"), "--out", str(tmp_path / "new")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # nothing made for a run that could not start
    for argv, said in [
        (["--query", "bees", "--k", "0"], "--k 0: ask for 1 or more"),
        (["--query", "bees", "--k", "-2"], "--k -2: ask for 1 or more"),
        (["--query", "   "], "--query is empty"),
    ]:
        assert main(["search", str(out), *argv]) == 2
        assert said in capsys.readouterr().err
    for argv, said in [  # refused before a reader is looked for or loaded
        (["--question", " "], "--question is empty"),
        (["--question", "Who?", "--answers", "0"], "--answers 0: give 1 or more"),
        (["--question", "Who?", "--top-k-chunks", "0"], "--top-k-chunks 0: give 1 or more"),
    ]:
        assert main(["ask", str(out), "--checkpoint", str(tmp_path / "no-reader"), *argv]) == 2
        assert said in capsys.readouterr().err
    with pytest.raises(ValueError, match="query is empty"):
        DocumentIndex.open(out).search("")
    assert read_documents(small / "bees.txt")[0].text == BEES


def test_an_interrupted_update_of_a_qdrant_index_is_redone_too(
    small: Path, tmp_path: Path, monkeypatch
) -> None:
    from structqa.documents.vectors import QdrantStore

    out = tmp_path / "index"
    with DocumentIndex(out, store="qdrant", create=True) as index:
        index.update([small])
    (small / "bees.txt").write_text("Bumblebees sleep in flowers at night.", encoding="utf-8")

    def stopped(self) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch, DocumentIndex(out) as index:
        patch.setattr(QdrantStore, "save", stopped)
        with pytest.raises(KeyboardInterrupt):
            index.update([small])
    with DocumentIndex(out) as index:
        report = index.update([small])
        assert (report.added_files, report.unchanged_files) == (1, 1)  # bees, being written
        assert len(index.dense) == len(index)
        assert index.search("where bumblebees sleep", k=1, retriever="dense")[0].source.endswith(
            "bees.txt"
        )


def test_the_same_folder_typed_from_elsewhere_keeps_its_vectors(
    small: Path, tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paths are stored as typed: indexed as `docs` from one folder and as `x/docs` from its
    parent, every file once looked removed and new, and was read and embedded again. A file
    whose content is known under a path no longer given is now moved, not re-embedded; its
    document ids and sources follow the new path."""
    (small / "mini.json").write_bytes((shared_data / "fixtures/squad-v1.1-mini.json").read_bytes())
    out = tmp_path / "index"
    monkeypatch.chdir(small.parent)
    first = DocumentIndex(out, create=True).update(["docs"])
    with DocumentIndex(out) as index:
        before = {h.chunk_id: h for h in index.search("bees pollinate flowers", k=50)}
        squad_ids = {h.doc_id for h in before.values() if h.source.endswith("mini.json")}
    assert squad_ids and all(i.startswith("docs/mini.json#") for i in squad_ids)
    monkeypatch.chdir(tmp_path.parent)
    typed = f"{tmp_path.name}/docs"
    with DocumentIndex(out) as index:
        again = index.update([typed])
        after = {h.chunk_id: h for h in index.search("bees pollinate flowers", k=50)}
    assert (again.moved_files, again.added_files, again.removed_files) == (3, 0, 0)
    assert again.chunks == first.chunks and "3 moved" in again.summary()
    assert set(after) == set(before)  # the same chunks, vectors and ids
    for cid, hit in after.items():
        assert hit.source == f"{tmp_path.name}/{before[cid].source}"
        assert hit.text == before[cid].text and hit.title == before[cid].title
        if hit.source.endswith("mini.json"):
            assert hit.doc_id == f"{tmp_path.name}/{before[cid].doc_id}"
    (tmp_path / "docs" / "bees.txt").rename(tmp_path / "docs" / "honey.txt")
    with DocumentIndex(out) as index:
        renamed = index.update([typed])
        titles = {h.source: h.title for h in index.search("bees", k=50)}
    assert (renamed.moved_files, renamed.added_files) == (1, 0)
    assert titles[f"{typed}/honey.txt"] == "honey"  # a title that was the file's name follows it
    # a rename that changes the reader is read again: the same bytes, other documents
    (tmp_path / "docs" / "honey.txt").rename(tmp_path / "docs" / "honey.html")
    with DocumentIndex(out) as index:
        retyped = index.update([typed])
    assert (retyped.moved_files, retyped.added_files, retyped.removed_files) == (0, 1, 1)


def test_a_corpus_line_that_is_not_a_record_is_skipped_and_named(tmp_path: Path) -> None:
    """One bad line once lost a whole BEIR corpus; now the line is skipped and named, the
    records around it read; a file with no record at all is still skipped whole."""
    lines = [
        json.dumps({"_id": "a", "title": "Bees", "text": BEES}),
        '{"_id": "b", "text": "cut off',
        json.dumps({"_id": "c", "text": VOLCANO}),
        "[1, 2]",
        json.dumps({"title": "no id", "text": "x"}),
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    notes: list[str] = []
    docs = read_documents(corpus, notes)
    assert [d.doc_id for d in docs] == ["a", "c"]
    (note,) = notes
    assert note.startswith(
        "3 line(s) not corpus records, skipped: 2, 4, 5 (line 2: JSONDecodeError"
    )
    assert "_id and a text" in note
    # a bad first line (and a UTF-8 mark) once made the file unrecognisable as a corpus
    marked = tmp_path / "marked.corpus.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines[1:4]).encode() + b"\n")
    notes = []
    assert [d.doc_id for d in read_documents(marked, notes)] == ["c"]
    assert notes[0].startswith("2 line(s) not corpus records, skipped: 1, 3")
    bad = tmp_path / "bad.corpus.jsonl"
    bad.write_text('{"_id": "b", "text": "cut off\n[1]\n', encoding="utf-8")
    with pytest.raises(Unreadable, match="no line is a corpus record"):
        read_documents(bad, [])


def test_a_folder_with_nothing_readable_gives_an_empty_index_and_says_so(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bm25s cannot save an index of no chunks: a folder of nothing readable crashed with a
    traceback and left the index marked unfinished; so did deleting every file of an index."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "table.csv").write_text("a,b\n1,2\n")
    out = tmp_path / "index"
    assert main(["index", str(empty), "--out", str(out), "--no-progress"]) == 1
    assert "holds no documents" in capsys.readouterr().err
    assert main(["search", str(out), "--query", "bees"]) == 0
    assert "no chunks found" in capsys.readouterr().err
    assert main(["index", str(small), "--out", str(out), "--no-progress"]) == 0
    with DocumentIndex.open(out) as index:
        assert index.search("bees", 1, "bm25")
    for f in small.iterdir():
        f.unlink()
    assert main(["index", str(small), "--out", str(out), "--no-progress"]) == 1
    with DocumentIndex.open(out) as index:  # whole again, and empty: no unfinished marker
        assert len(index) == 0 and index.search("bees", 3, "hybrid") == []


def test_labelled_questions_whose_passages_are_not_indexed_are_refused(
    small: Path, tmp_path: Path, shared_data: Path, capsys, caplog
) -> None:
    """fit-fusion, evaluate-ask and fit-no-answer match a question to its passage among the
    documents indexed from a SQuAD/MRQA file; on an index without them every recall was 0.000
    and a fit of nothing was saved. Now: an error saying what to index; a warning for some."""
    from structqa.data.readers import read_extractive
    from structqa.documents.evaluate import check_passages_indexed

    mini = shared_data / "fixtures/squad-v1.1-mini.json"
    out = tmp_path / "index"
    assert main(["index", str(small), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["fit-fusion", str(out), "--questions", str(mini)]) == 2
    err = capsys.readouterr().err
    assert "none of its" in err and "structqa index FOLDER" in err
    assert not (out / "fusion.json").exists()
    assert main(["evaluate-ask", str(out), "--eval", str(mini), "--retrieval-only"]) == 2
    examples = list(read_extractive(mini).examples)
    squad = json.loads(mini.read_text())
    first_paragraph = squad["data"][0]["paragraphs"][:1]
    half = tmp_path / "half.json"
    half.write_text(
        json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": first_paragraph}]})
    )
    assert main(["index", str(small), str(half), "--out", str(out), "--no-progress"]) == 0
    with DocumentIndex.open(out) as index, caplog.at_level(logging.WARNING):
        check_passages_indexed(index, examples, "mini")
    first = sum(ex.context == examples[0].context for ex in examples)
    assert f"{len(examples) - first} of {len(examples)} questions' passages" in caplog.text


def test_text_with_a_byte_order_mark_is_read_by_it(tmp_path: Path) -> None:
    """Windows' "Unicode" text (UTF-16 with its mark) was skipped as binary, and UTF-8's mark
    stayed at the head of the first chunk as an invisible character."""
    (tmp_path / "u16.txt").write_bytes("Bees make honey.\r\n".encode("utf-16"))
    (tmp_path / "u8.md").write_bytes(b"\xef\xbb\xbfBees make wax.\n")
    (tmp_path / "fake.txt").write_bytes(b"\xff\xfe\x00\xd8")  # a mark, then a lone surrogate
    (tmp_path / "u32.txt").write_bytes("Bees dance.".encode("utf-32"))  # its mark begins FF FE
    notes: list[str] = []
    (u16,) = read_documents(tmp_path / "u16.txt", notes)
    assert u16.text == "Bees make honey.\r\n" and notes == [
        "read as UTF-16-LE (its byte-order mark)"
    ]
    (u8,) = read_documents(tmp_path / "u8.md", notes)
    assert u8.text == "Bees make wax.\n" and len(notes) == 1
    with pytest.raises(Unreadable, match="starts as utf-16-le text but is not"):
        read_documents(tmp_path / "fake.txt", notes)
    (u32,) = read_documents(tmp_path / "u32.txt", notes)
    assert u32.text == "Bees dance." and notes[-1] == "read as UTF-32-LE (its byte-order mark)"


def test_an_unreachable_qdrant_server_is_a_clear_error(
    small: Path, tmp_path: Path, capsys, recwarn
) -> None:
    import socket
    import threading

    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "index"
    running = set(threading.enumerate())
    assert main(["index", str(small), "--out", str(out), "--store", f"qdrant:{url}"]) == 2
    for thread in set(threading.enumerate()) - running:  # qdrant-client checked versions in one
        thread.join(timeout=10)
    err = capsys.readouterr().err
    assert f"cannot reach the Qdrant server at {url}" in err and "start it" in err
    assert "Traceback" not in err
    # only the project's error: not qdrant-client's own warning too, which said no more
    assert not [w for w in recwarn if "Failed to obtain server version" in str(w.message)]


def test_recall_at_k_ranks_k_documents_not_k_chunks(small: Path, tmp_path: Path) -> None:
    from structqa.documents.metrics import ranked_documents, read_qrels

    long = " ".join(f"Bees visit flower number {i} of the meadow today." for i in range(200))
    (small / "meadow.txt").write_text(long, encoding="utf-8")
    with DocumentIndex(tmp_path / "index", create=True) as index:
        index.update([small])
        chunks = [h.doc_id for h in index.search("bees visit flowers", k=2, retriever="bm25")]
        assert len(set(chunks)) == 1  # the long file's chunks fill the first places
        (ranked,) = ranked_documents(index, ["bees visit flowers"], 2, "bm25")
        assert len(ranked) == 2 and ranked[0] == chunks[0]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1.0\nq1\td2\t2\n", encoding="utf-8")
    assert read_qrels(qrels) == {"q1": {"d1": 1, "d2": 2}}
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\tyes\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"qrels.tsv: line 2: the score 'yes' is not a number"):
        read_qrels(qrels)


def test_a_chunk_without_a_character_a_model_reads_is_left_out_and_named(
    small: Path, tmp_path: Path
) -> None:
    """Such a chunk (a PDF page of glyphs without Unicode) was indexed, and the reader
    refused it: every question that retrieved it failed, and the service answered 500."""
    (small / "glyphs.txt").write_text("\ufffd\ufffd\ufffd \ufffd\ufffd\n", encoding="utf-8")
    with DocumentIndex(tmp_path / "index", create=True) as index:
        report = index.update([small])
        assert {h.source for h in index.search("bees volcano", 10, "bm25")} == {
            str(small / "bees.txt"),
            str(small / "etna.txt"),
        }
        assert len(index) == report.chunks
    ((path, note),) = report.read.notes
    assert path.endswith("glyphs.txt") and "1 chunk(s) without a character a model reads" in note


def test_an_index_inside_the_folder_it_indexes_is_not_read_as_documents(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = small / "index"
    for _ in range(2):
        assert main(["index", str(small), "--out", str(out), "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert "skipped" not in captured.err and "note" not in captured.err
    assert "2 files read" not in captured.out and "2 unchanged" in captured.out
    with DocumentIndex.open(out) as index:  # and through the Python API too
        assert index.update([small]).unchanged_files == 2
        assert {h.source for h in index.search("index", 10, "bm25")} <= {
            str(small / "bees.txt"),
            str(small / "etna.txt"),
        }


def test_an_index_of_older_readers_is_chunked_again_and_an_encoder_of_another_size_refused(
    small: Path, tmp_path: Path
) -> None:
    out = tmp_path / "index"
    with DocumentIndex(out, create=True) as index:
        index.update([small])
    meta = json.loads((out / "index.json").read_text())
    assert meta["readers"] == READERS_VERSION and meta["dimension"] == 384
    assert meta["encoder"] == str(default_encoder_path())
    del meta["readers"]  # as an index made before the readers were versioned
    (out / "index.json").write_text(json.dumps(meta))
    with DocumentIndex.open(out) as index:
        report = index.update([small])
        assert (report.added_files, report.unchanged_files) == (2, 0)
        assert index.update([small]).unchanged_files == 2  # once only
    meta["dimension"] = 768
    (out / "index.json").write_text(json.dumps(meta))
    with (
        DocumentIndex.open(out) as index,
        pytest.raises(ValueError, match="its vectors have 768 dimensions .* this encoder's 384"),
    ):
        index.search("bees", 1, "dense")


@pytest.mark.parametrize("listed", [False, True])
def test_flat_squad_records_give_their_passages_as_documents(
    tmp_path: Path, shared_data: Path, listed: bool
) -> None:
    """Hugging Face's SQuAD records (one question a line, or a JSON list) train and score;
    indexing the same file refused it as "neither a BEIR corpus nor a SQuAD/MRQA file"."""
    squad = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text())
    records = [
        {
            "id": qa["id"],
            "title": article["title"],
            "context": paragraph["context"],
            "question": qa["question"],
            "answers": {
                "text": [a["text"] for a in qa["answers"]],
                "answer_start": [a["answer_start"] for a in qa["answers"]],
            },
        }
        for article in squad["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    path = tmp_path / ("own.json" if listed else "own.jsonl")
    text = json.dumps(records) if listed else "".join(json.dumps(r) + "\n" for r in records)
    path.write_text(text)
    squad_file = tmp_path / "mini.json"
    squad_file.write_text(json.dumps(squad))
    flat_docs = read_documents(path)
    from_squad = read_documents(squad_file)
    assert [d.text for d in flat_docs] == [d.text for d in from_squad]
    assert [d.title for d in flat_docs] == [d.title for d in from_squad]
    assert len({r["context"] for r in records}) == len(flat_docs) > 1


def test_a_line_that_is_no_record_is_named_and_deep_nesting_does_not_stop_indexing(
    tmp_path: Path,
) -> None:
    good = {
        "id": "q",
        "context": "Bees make honey.",
        "question": "?",
        "answers": {"text": [], "answer_start": []},
    }
    path = tmp_path / "own.jsonl"
    path.write_text(json.dumps(good) + "\n[1, 2]\n" + "[" * 100000 + "]" * 100000 + "\n")
    notes: list[str] = []
    (doc,) = read_documents(path, notes)
    assert doc.text == "Bees make honey."
    assert notes == ["2 passage(s) skipped: line 2 (not a JSON record), line 3 (not a JSON record)"]
