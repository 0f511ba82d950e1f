"""Documents from files, cut into chunks that the retrievers index and the reader reads.

A file becomes one document (``.txt``, ``.md``, ``.html``/``.htm``, ``.pdf``: one text per
file, a PDF's pages joined with their character offsets kept), or many (a SQuAD/MRQA file: each
context; a BEIR ``corpus.jsonl[.gz]``: each record, title and text). A file that cannot be
read (a corrupt PDF, a binary file named ``.txt``, text in no known encoding, an empty file)
is skipped with its reason; the rest are read, nothing is lost.

Chunks follow sentence boundaries, at most ``max_tokens`` tokens of the sentence encoder
(all-MiniLM-L6-v2 reads 256), consecutive chunks sharing their boundary sentence, so every
chunk fits the dense encoder whole and a reader's window with the question. Each keeps its
document, page and character offsets into the document's extracted text.

Why sentences are split by a regular expression and not spaCy: indexing 100k chunks must take
minutes, not the hour a parser would; a chunk boundary in the wrong place costs nothing but a
little overlap.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import html.parser
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from structqa.text.spans import pieces

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
HTML_SUFFIXES = (".html", ".htm")
QA_SUFFIXES = (".json", ".jsonl", ".jsonl.gz", ".json.gz")
ENCODINGS = ("utf-8", "cp1252")  # tried in order; cp1252 reads Latin-1 text as well
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")


@dataclass(frozen=True)
class Document:
    """A document's extracted text; ``pages`` are (start char, page number) of a PDF's pages."""

    doc_id: str
    source: str  # the file it came from
    title: str
    text: str
    pages: tuple[tuple[int, int], ...] = ()

    def page_at(self, char: int) -> int | None:
        """The page number (from 1) holding character ``char``, or None for a text file."""
        page = None
        for start, number in self.pages:
            if start > char:
                break
            page = number
        return page


@dataclass(frozen=True)
class Chunk:
    doc_id: str
    start: int  # character offsets into the document's text
    end: int
    text: str
    page: int | None = None


@dataclass
class ReadReport:
    """What reading some paths did: files read, documents found, files skipped and why."""

    files: int = 0
    documents: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    notes: list[tuple[str, str]] = field(default_factory=list)  # read, with a caveat

    def summary(self, details: bool = True) -> str:
        """The counts, then (``details``) each skipped file and note on a line of its own."""
        out = f"{self.files} files read, {self.documents} documents, {len(self.skipped)} skipped"
        if not details:
            return out
        out += "".join(f"\n  skipped {f}: {why}" for f, why in self.skipped)
        return out + "".join(f"\n  note {f}: {what}" for f, what in self.notes)


class Unreadable(ValueError):
    """A file that cannot be read as a document, and why."""


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(paths: Sequence[str | Path]) -> list[Path]:
    """Every file under ``paths`` (folders recursively, hidden ones left out), sorted; a file
    reached through two of the paths (``docs docs/a.txt``) is listed once."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            ]
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for f in out:
        if (real := f.resolve()) not in seen:
            seen.add(real)
            unique.append(f)
    return unique


def reader_kind(path: str | Path) -> str:
    """Which reader a file's name sends it to (pdf, html, text, qa, or none)."""
    name = Path(path).name.lower()
    for kind, suffixes in (
        ("pdf", (".pdf",)),
        ("html", HTML_SUFFIXES),
        ("text", TEXT_SUFFIXES),
        ("qa", QA_SUFFIXES),
    ):
        if name.endswith(suffixes):
            return kind
    return "none"


def read_documents(path: Path, notes: list[str] | None = None) -> list[Document]:
    """The documents of one file (see the module docstring), or :class:`Unreadable`; caveats
    of a file that was read (text that is not UTF-8) are appended to ``notes``."""
    kind = reader_kind(path)
    if kind == "pdf":
        return [_pdf(path)]
    if kind == "html":
        return [_one(path, _html_text(_decode(path, notes)))]
    if kind == "text":
        return [_one(path, _decode(path, notes))]
    if kind == "qa":
        return _collection(path, notes)
    raise Unreadable(f"not a document type read here ({path.suffix or 'no suffix'})")


def _one(path: Path, text: str) -> Document:
    if not text.strip():
        raise Unreadable("empty: no text")
    return Document(str(path), str(path), path.stem, text)


def _decode(path: Path, notes: list[str] | None) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise Unreadable("empty file")
    # a byte-order mark names the encoding: UTF-16 (Windows' "Unicode" text) has NUL bytes,
    # and UTF-8's mark is not text (it once led every chunk of such a file)
    marks = (  # UTF-32's before UTF-16's, which begin them
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    )
    for bom, encoding in marks:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as err:
                raise Unreadable(f"starts as {encoding} text but is not ({err})") from None
            if encoding != "utf-8" and notes is not None:
                notes.append(f"read as {encoding.upper()} (its byte-order mark)")
            if not text.strip():
                raise Unreadable("empty file")
            return text
    if b"\x00" in data[:4096]:
        raise Unreadable("binary content (NUL bytes), not text")
    for encoding in ENCODINGS:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if encoding != ENCODINGS[0]:
            if notes is not None:
                notes.append(f"not UTF-8; read as {encoding} (Latin-1 and Windows text)")
        return text
    raise Unreadable(f"text in none of the encodings {', '.join(ENCODINGS)}")


class _TextOf(html.parser.HTMLParser):
    """The visible text of an HTML page: no scripts or styles, blocks on lines of their own."""

    BLOCKS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs) -> None:  # noqa: ARG002
        if tag in ("script", "style", "noscript"):
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript"):
            self.hidden = max(0, self.hidden - 1)

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def _html_text(source: str) -> str:
    parser = _TextOf()
    parser.feed(source)
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\n\s*\n\s*", "\n\n", text).strip()


def _pdf(path: Path) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # pypdf's own errors (a damaged file: PdfReadError, LimitReachedError on a reference loop,
    # ...) and what its parsing of a damaged object lets through: one bad PDF is skipped and
    # named, never the end of indexing a whole folder
    damaged = (PyPdfError, ValueError, KeyError, IndexError, TypeError, AttributeError)
    try:
        reader = PdfReader(str(path))
        texts = [page.extract_text() or "" for page in reader.pages]
    except (*damaged, RecursionError, OSError) as err:
        raise Unreadable(
            f"not a readable PDF ({type(err).__name__}: {err}); open and re-save it as PDF, "
            "or export its text"
        ) from None
    pages, parts, at = [], [], 0
    for number, text in enumerate(texts, start=1):
        pages.append((at, number))
        parts.append(text)
        at += len(text) + 2
    text = "\n\n".join(parts)
    if not text.strip():
        raise Unreadable("a PDF without extractable text (scanned pages need OCR first)")
    return Document(str(path), str(path), path.stem, text, tuple(pages))


def context_key(context: str) -> str:
    """The suffix of the document id a SQuAD/MRQA context gets in an index (``FILE#KEY``)."""
    return hashlib.sha1(context.encode()).hexdigest()[:12]


def _collection(path: Path, notes: list[str] | None = None) -> list[Document]:
    """A BEIR corpus (records with ``_id`` and ``text``) or a SQuAD/MRQA file (each context)."""
    opener: Callable = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as f:
            head = f.read(1 << 16)
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise Unreadable(f"cannot be read as text ({err})") from None
    lines = [line for line in head.splitlines()[:5] if line.strip()]
    # a BEIR corpus: records of one line each, with an _id (a bad first line is skipped later)
    if lines and lines[0].lstrip()[:1] == "{" and any('"_id"' in line for line in lines):
        return _beir(path, opener, notes)
    from structqa.data.readers import read_extractive

    data_log = logging.getLogger("structqa.data")  # its notes on the questions and answers
    level = data_log.level  # (repaired offsets, skipped questions) say nothing of the passages
    data_log.setLevel(logging.ERROR)
    try:
        examples = read_extractive(path).examples
    except (ValueError, OSError) as err:
        raise Unreadable(f"neither a BEIR corpus nor a SQuAD/MRQA file ({err})") from None
    finally:
        data_log.setLevel(level)
    docs: dict[str, Document] = {}
    for ex in examples:
        key = context_key(ex.context)
        if key not in docs:
            title = getattr(ex, "title", "") or f"{path.stem} context {len(docs) + 1}"
            docs[key] = Document(f"{path}#{key}", str(path), title, ex.context)
    if not docs:
        raise Unreadable("no contexts")
    return list(docs.values())


def _beir(path: Path, opener: Callable, notes: list[str] | None = None) -> list[Document]:
    """A BEIR corpus; a line that is not a record is skipped and named in ``notes`` (one bad
    line in a corpus of thousands once lost the whole file), a file with none is unreadable."""
    docs: list[Document] = []
    bad: list[int] = []
    first_error = ""
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8-sig") as f:
            for lineno, line in enumerate(f, start=1):  # noqa: B007 (named in the error)
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    doc_id, text = str(rec["_id"]), str(rec.get("text", ""))
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    bad.append(lineno)
                    first_error = first_error or f"line {lineno}: {type(err).__name__} {err}"
                    continue
                title = str(rec.get("title") or "")
                full = f"{title}\n\n{text}" if title else text
                if full.strip():
                    docs.append(Document(doc_id, str(path), title, full))
    # damage past the part read to recognise the format: a truncated .gz, bytes not UTF-8
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise Unreadable(
            f"unreadable after line {lineno} ({type(err).__name__}: {err}); "
            "fix or re-download the file"
        ) from None
    if bad and not docs:
        raise Unreadable(f"no line is a corpus record ({first_error})")
    if bad and notes is not None:
        shown = ", ".join(map(str, bad[:10])) + (
            f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        )
        notes.append(
            f"{len(bad)} line(s) not corpus records, skipped: {shown} ({first_error}); "
            "each record needs an _id and a text"
        )
    return docs


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of ``text``'s sentences (blank lines also end one), whitespace left out."""
    out = []
    for a, b in pieces(text, _SENTENCE_END):
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def chunk_document(
    doc: Document, count_tokens: Callable[[Sequence[str]], list[int]], max_tokens: int = 250
) -> list[Chunk]:
    """``doc`` cut at sentence boundaries into chunks of at most ``max_tokens`` tokens (by
    ``count_tokens``), each sharing its first sentence with the previous chunk's last; a
    sentence longer than that is cut at words."""
    bounds = [start for start, _ in doc.pages[1:]] + [len(doc.text)]
    sections, at = [], 0
    for end in bounds:  # a PDF's pages are chunked apart: a chunk is on one page
        sections.append((at, end))
        at = end
    chunks: list[Chunk] = []
    for a, b in sections:
        spans = [(x + a, y + a) for x, y in sentence_spans(doc.text[a:b])]
        chunks += _chunk_pieces(doc, _pieces(doc.text, spans, count_tokens, max_tokens), max_tokens)
    return chunks


def _chunk_pieces(
    doc: Document, pieces: list[tuple[int, int, int]], max_tokens: int
) -> list[Chunk]:
    chunks: list[Chunk] = []
    i = 0
    while i < len(pieces):
        j, used = i, 0
        while j < len(pieces) and used + pieces[j][2] <= max_tokens:
            used += pieces[j][2]
            j += 1
        j = max(j, i + 1)
        a, b = pieces[i][0], pieces[j - 1][1]
        chunks.append(Chunk(doc.doc_id, a, b, doc.text[a:b], doc.page_at(a)))
        if j >= len(pieces):
            break
        i = j - 1 if j - 1 > i else j  # overlap: the boundary sentence opens the next chunk
    return chunks


def _pieces(
    text: str,
    spans: list[tuple[int, int]],
    count_tokens: Callable[[Sequence[str]], list[int]],
    max_tokens: int,
) -> list[tuple[int, int, int]]:
    """(start, end, tokens) of each sentence, sentences over ``max_tokens`` cut at words."""
    counts = count_tokens([text[a:b] for a, b in spans]) if spans else []
    out = []
    for (a, b), n in zip(spans, counts, strict=True):
        if n <= max_tokens:
            out.append((a, b, n))
            continue
        words = [m.span() for m in re.finditer(r"\S+", text[a:b])]
        step = max(1, len(words) * max_tokens // (2 * n))  # about half the limit a piece
        for k in range(0, len(words), step):
            s, e = a + words[k][0], a + words[min(k + step, len(words)) - 1][1]
            out.append((s, e, count_tokens([text[s:e]])[0]))
    return out


def read_all(paths: Iterable[Path], report: ReadReport) -> Iterator[tuple[Path, list[Document]]]:
    """Each readable file with its documents; the others are counted in ``report``."""
    for path in paths:
        notes: list[str] = []
        try:
            docs = read_documents(path, notes)
        except (Unreadable, OSError) as err:
            report.skipped.append((str(path), str(err)))
            continue
        finally:
            report.notes += [(str(path), note) for note in notes]
        report.files += 1
        report.documents += len(docs)
        yield path, docs
