"""What a real folder holds past the happy path: a BEIR folder with its queries beside the
corpus, records and files with damaged text, tables in HTML, text without spaces, a stray
byte in UTF-8 text, QA files whose questions are not all well formed."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from structqa.documents.ingest import (
    Document,
    ReadReport,
    chunk_document,
    read_all,
    read_documents,
)
from structqa.paths import default_encoder_path


def _read(paths: list[Path]) -> tuple[dict[str, list[Document]], ReadReport]:
    report = ReadReport()
    return {p.name: docs for p, docs in read_all(paths, report)}, report


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_beir_folders_queries_are_not_indexed_as_documents(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "Bees", "text": "Bees."}])
    queries = _jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "What dances?"}])
    docs, report = _read([corpus, queries])
    assert list(docs) == ["corpus.jsonl"] and report.documents == 1
    ((name, why),) = report.skipped
    assert name.endswith("queries.jsonl") and "evaluate-retrieval --queries" in why


def test_damaged_corpus_records_are_skipped_and_named(tmp_path: Path) -> None:
    corpus = _jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "ok", "title": "Etna", "text": "Etna is a volcano."},
            {"_id": "cut", "title": "", "text": "half of a pair \ud800 here"},
            {"_id": "null", "title": "Empty", "text": None},
            {"_id": "list", "text": ["not", "text"]},
        ],
    )
    docs, report = _read([corpus])
    texts = [d.text for d in docs["corpus.jsonl"]]
    # a null text is an empty one: the title alone is the document, never the word "None"
    assert texts == ["Etna\n\nEtna is a volcano.", "Empty"]
    ((_, note),) = report.notes
    assert "2 line(s) not corpus records, skipped: 2, 4" in note
    assert "its text contains a lone surrogate U+D800 at offset 15" in note


def test_a_nul_anywhere_in_a_text_file_skips_it_with_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("Bees dance. " * 600 + "\x00 the end.", encoding="utf-8")
    docs, report = _read([path])
    assert not docs
    ((_, why),) = report.skipped
    assert f"NUL character (U+0000) at offset {12 * 600}" in why


def test_html_table_cells_and_lists_stay_apart(tmp_path: Path) -> None:
    page = tmp_path / "cities.html"
    page.write_text(
        "<table><tr><th>City</th><th>Country</th></tr><tr><td>Paris</td><td>France</td></tr>"
        "</table><dl><dt>Capital</dt><dd>Rome</dd></dl><p>Bees <b>dance</b>.</p>",
        encoding="utf-8",
    )
    (doc,) = read_documents(page)
    assert doc.text == "City | Country\n\nParis | France\n\nCapital\n\nRome\n\nBees dance."


def test_text_without_spaces_is_chunked_within_the_encoders_limit() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(default_encoder_path()))

    def count(texts):
        return [len(x) for x in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    for text in ("北京是中国的首都。" * 300, "北京是中国的首都" * 300):
        chunks = chunk_document(Document("d", "d", "", text), count, 254)
        assert len(chunks) > 5 and max(count([c.text for c in chunks])) <= 254
        assert chunks[0].start == 0 and chunks[-1].end == len(text)
        assert all(text[c.start : c.end] == c.text for c in chunks)
    sentences = chunk_document(Document("d", "d", "", "北京是中国的首都。" * 300), count, 254)
    assert all(c.text.endswith("。") for c in sentences)  # cut at sentence ends


def test_a_boundary_sentence_is_not_a_chunk_of_its_own() -> None:
    text = " ".join(["Alpha"] * 100) + ". " + " ".join(["Beta"] * 100) + ". "
    text += " ".join(["Gamma"] * 200) + "."
    chunks = chunk_document(Document("d", "d", "", text), lambda xs: [len(x.split()) for x in xs])
    assert [len(c.text.split()) for c in chunks] == [200, 200]
    pairs = zip(chunks[1:], chunks[:-1], strict=True)
    assert not any(a.start >= b.start and a.end <= b.end for a, b in pairs)


@pytest.mark.parametrize(
    ("raw", "text", "said"),
    [
        (
            "Le café de Zürich ".encode() + b"\xe9t\xe9.",
            "Le café de Zürich \ufffdt\ufffd.",
            "UTF-8 with 2",
        ),
        (b"Caf\xe9 \x81 cr\xe8me.", "Caf\xe9 \x81 cr\xe8me.", "read as Latin-1"),
        (b"Caf\xe9 cr\xe8me \x93quoted\x94.", "Café crème \u201cquoted\u201d.", "read as cp1252"),
    ],
)
def test_text_that_is_not_all_utf8_is_read_not_dropped(
    tmp_path: Path, raw: bytes, text: str, said: str
) -> None:
    path = tmp_path / "note.txt"
    path.write_bytes(raw)
    notes: list[str] = []
    (doc,) = read_documents(path, notes)
    assert doc.text == text
    (note,) = notes
    assert said in note


def test_a_qa_files_passages_do_not_depend_on_its_questions(tmp_path: Path) -> None:
    qa = {"id": "q1", "question": "Who?", "answers": [{"text": "Bees", "answer_start": 0}]}
    squad = {
        "version": "v1.1",
        "data": [
            {
                "title": "Insects",
                "paragraphs": [
                    {"context": "Bees dance to tell where flowers are.", "qas": [qa]},
                    {"context": "Ants follow trails of scent.", "qas": [qa]},  # the id again
                    {"context": "Moths fly at night.", "qas": []},
                    {"context": "Cut \ud800 pair.", "qas": []},
                ],
            }
        ],
    }
    path = tmp_path / "insects.json"
    path.write_text(json.dumps(squad), encoding="utf-8")
    notes: list[str] = []
    docs = read_documents(path, notes)
    assert [d.text for d in docs] == [
        "Bees dance to tell where flowers are.",
        "Ants follow trails of scent.",
        "Moths fly at night.",
    ]
    assert all(d.title == "Insects" for d in docs)
    (note,) = notes
    assert "1 passage(s) skipped: data[0].paragraphs[3] (a lone surrogate" in note


def test_a_damaged_qa_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    import gzip

    lines = [json.dumps({"header": {"dataset": "x"}})] + [
        json.dumps({"context": f"Passage {i} about bees. " * 40, "qas": []}) for i in range(400)
    ]
    whole = gzip.compress("\n".join(lines).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # a download cut short
    odd = {"version": "v1.1", "data": [{"title": "T", "paragraphs": 5}]}
    (tmp_path / "odd.json").write_text(json.dumps(odd), encoding="utf-8")
    (tmp_path / "ok.txt").write_text("Bees dance.", encoding="utf-8")
    docs, report = _read(sorted(tmp_path.iterdir()))
    assert list(docs) == ["ok.txt"]
    reasons = dict(report.skipped)
    cut = reasons[str(tmp_path / "cut.jsonl.gz")]  # where the damage is, and what to do
    assert "compressed data cut short" in cut and "copy the file again" in cut
    assert "no contexts" in reasons[str(tmp_path / "odd.json")]


def test_a_corpus_whose_records_have_no_text_field_is_not_read_as_empty(tmp_path: Path) -> None:
    """A corpus with the text under another field read as 0 documents, without a word."""
    body = _jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "body": "Alpha beta."}] * 3)
    docs, report = _read([body])
    assert not docs
    ((_, why),) = report.skipped
    assert "no record has a title or a text" in why and "_id, body" in why
    (tmp_path / "mixed").mkdir()
    mixed = _jsonl(
        tmp_path / "mixed" / "corpus.jsonl",
        [{"_id": "d1", "text": "Bees dance."}, {"_id": "d2", "body": "Alpha."}],
    )
    docs, report = _read([mixed])
    assert len(docs["corpus.jsonl"]) == 1
    ((_, note),) = report.notes
    assert "1 record(s) with neither a title nor a text, skipped (the first on line 2)" in note


@pytest.mark.parametrize(
    ("meta", "encoding"),
    [
        ('<meta charset="shift_jis">', "shift_jis"),
        ('<meta http-equiv="Content-Type" content="text/html; charset=GBK">', "gbk"),
        ("<meta charset=iso-8859-1>", "cp1252"),
    ],
)
def test_an_html_page_is_read_in_the_charset_it_declares(
    tmp_path: Path, meta: str, encoding: str
) -> None:
    words = {"shift_jis": "東京の人口", "gbk": "北京的人口", "cp1252": "Café – “naïve”"}
    page = tmp_path / "page.html"
    page.write_bytes(
        f"<html><head>{meta}</head><body><p>{words[encoding]}</p></body></html>".encode(encoding)
    )
    docs, report = _read([page])
    assert docs["page.html"][0].text == words[encoding]
    assert not report.notes


def test_a_page_declaring_utf16_without_its_mark_is_read_as_utf8(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_bytes('<meta charset="utf-16"><p>Zürich</p>'.encode())
    docs, _ = _read([page])
    assert docs["page.html"][0].text == "Zürich"


def test_a_stray_byte_reads_the_same_with_a_byte_order_mark_as_without(tmp_path: Path) -> None:
    body = "Crème brûlée is a dessert. ".encode() + b"\xe9" + b" It is served cold."
    at = body.index(b"\xe9")
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_bytes(body)
    marked.write_bytes(codecs.BOM_UTF8 + body)
    docs, report = _read([plain, marked])
    assert docs["plain.txt"][0].text == docs["marked.txt"][0].text
    assert docs["marked.txt"][0].text == "Crème brûlée is a dessert. \ufffd It is served cold."
    notes = dict(report.notes)
    assert not report.skipped
    for path, offset in [(plain, at), (marked, at + len(codecs.BOM_UTF8))]:  # the file's bytes
        said = "UTF-8 with 1 byte sequence(s) that are not, read as U+FFFD"
        assert f"{said} (the first at byte {offset})" in notes[str(path)]


def test_a_pdf_page_that_cannot_be_read_costs_that_page_alone(tmp_path: Path) -> None:
    from test_documents import pdf_bytes

    good = pdf_bytes(["Copper conducts heat well.", "Tin melts early.", "Lead is heavy."])
    stream = b"BT /F1 12 Tf 72 720 Td (Tin melts early.) Tj ET"
    head = f"<< /Length {len(stream)} >>".encode()
    assert good.count(head) == 1
    # page 2's stream names a filter pypdf does not have (the offsets after it shift: pypdf
    # finds the objects again, as it does in a file saved with a wrong cross-reference table)
    path = tmp_path / "metals.pdf"
    path.write_bytes(good.replace(head, head[:-3] + b" /Filter /Foo >>"))
    docs, report = _read([path])
    (doc,) = docs["metals.pdf"]
    assert "Copper conducts heat well." in doc.text and "Tin" not in doc.text
    assert doc.page_at(doc.text.index("Lead is heavy.")) == 3  # pages keep their numbers
    (note,) = [what for name, what in report.notes if name == str(path)]
    assert "page 2 of 3 not read" in note and "Unsupported filter /Foo" in note
    blank = tmp_path / "blank.pdf"  # no page readable: the file is skipped, as before
    blank.write_bytes(
        pdf_bytes(["Tin melts early."]).replace(head, head[:-3] + b" /Filter /Foo >>")
    )
    _, report = _read([blank])
    ((name, why),) = report.skipped
    assert name == str(blank) and "not a readable PDF" in why and "Unsupported filter" in why
