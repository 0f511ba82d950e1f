"""Documents from files, cut into chunks that the retrievers index and the reader reads.

A file becomes one document (``.txt``, ``.md``, ``.html``/``.htm``, ``.pdf``: one text per
file, a PDF's pages joined with their character offsets kept), or many (a SQuAD/MRQA file or
Hugging Face's SQuAD records: each context; a BEIR ``corpus.jsonl[.gz]``: each record, title
and text). A file that cannot be read (a corrupt PDF, a binary file named ``.txt``, text in no
known encoding) is skipped with its reason, and so is an empty one (said apart: it holds no
text, which an index takes as a change); the rest are read, nothing is lost (a PDF page that
cannot be read costs that page, named in a note).

Chunks follow sentence boundaries, at most ``max_tokens`` tokens of the sentence encoder
(all-MiniLM-L6-v2 reads 256), consecutive chunks sharing their boundary sentence, so every
chunk fits the dense encoder whole and a reader's window with the question. Each keeps its
document, page and character offsets into the document's extracted text.

Why sentences are split by a regular expression and not spaCy: indexing 100k chunks must take
minutes, not the hour a parser would; a chunk boundary in the wrong place costs nothing but a
little overlap.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from structqa.data.hygiene import text_problem
from structqa.data.records import DataError
from structqa.data.squad import file_lines
from structqa.documents.textfiles import Empty, Unreadable, decode, html_text
from structqa.text.spans import pieces

log = logging.getLogger(__name__)

# a line or list item of a QA file that is not a JSON object (named when skipped)
_NOT_A_RECORD = object()
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
HTML_SUFFIXES = (".html", ".htm")
QA_SUFFIXES = (".json", ".jsonl", ".jsonl.gz", ".json.gz")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Latin sentence ends before a capital or digit; CJK ones (no space follows them) anywhere
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])"
    r"|(?<=[。！？])(?![」』）\"')])\s*|(?<=[。！？][」』）\"')])\s*|\n\s*\n"
)


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
    empty: list[str] = field(default_factory=list)  # of the skipped: files without any text

    def summary(self, details: bool = True) -> str:
        """The counts, then (``details``) each skipped file and note on a line of its own."""
        out = f"{self.files} files read, {self.documents} documents, {len(self.skipped)} skipped"
        if not details:
            return out
        out += "".join(f"\n  skipped {f}: {why}" for f, why in self.skipped)
        return out + "".join(f"\n  note {f}: {what}" for f, what in self.notes)


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


def not_read_here(path: str | Path) -> str | None:
    """Why no reader reads ``path``, by its name alone (a film, an archive), or None."""
    if reader_kind(path) != "none":
        return None
    suffix = Path(path).suffix or "no suffix"
    return f"not a document type read here ({suffix}); save it as PDF, HTML or text to index it"


def read_documents(path: Path, notes: list[str] | None = None) -> list[Document]:
    """The documents of one file (see the module docstring), or :class:`Unreadable` (an
    empty file: :class:`Empty`); caveats of a file that was read (text that is not UTF-8, a
    PDF page that was not) are appended to ``notes``."""
    if (why := not_read_here(path)) is not None:
        raise Unreadable(why)
    if _blank(path):
        raise Empty("empty file")
    kind = reader_kind(path)
    if kind == "pdf":
        return [_pdf(path, notes)]
    if kind == "html":
        return [_one(path, html_text(_checked(decode(path, notes, html=True))))]
    if kind == "text":
        return [_one(path, _checked(decode(path, notes)))]
    return _collection(path, notes)


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but ASCII whitespace (read until a byte that is not)."""
    with open(path, "rb") as f:
        while block := f.read(1 << 16):
            if block.strip():
                return False
    return True


def _checked(text: str) -> str:
    """``text``, or :class:`Unreadable` where it breaks the text rule anywhere (a NUL past the
    part read to tell text from binary once reached the reader and failed every question that
    retrieved its chunk)."""
    problem = text_problem(text)
    if problem is not None:
        raise Unreadable(f"the text contains {problem}; remove it, or save the file again as text")
    return text


def _one(path: Path, text: str) -> Document:
    if not text.strip():
        raise Empty("empty: no text")
    return Document(str(path), str(path), path.stem, text)


def _pdf(path: Path, notes: list[str] | None = None) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

    # pypdf's own errors (a damaged file: PdfReadError, LimitReachedError on a reference loop,
    # ...) and what its parsing of a damaged object lets through: one bad PDF is skipped and
    # named, never the end of indexing a whole folder; one bad page costs that page alone
    damaged = (PyPdfError, ValueError, KeyError, IndexError, TypeError, AttributeError)
    broken = (*damaged, NotImplementedError, AssertionError, RecursionError, OSError)
    texts: list[str] = []
    failed: list[tuple[int, BaseException]] = []  # (page number, why)
    try:
        reader = PdfReader(str(path))
        for number, page in enumerate(reader.pages, start=1):
            try:
                texts.append(page.extract_text() or "")
            except (DependencyError, FileNotDecryptedError):
                raise  # (the whole file's: said below)
            except broken as err:
                texts.append("")  # an empty page keeps the others' numbers
                failed.append((number, err))
        if failed and len(failed) == len(texts):
            raise failed[0][1]
    except DependencyError as err:  # AES without pypdf's crypto extra
        raise Unreadable(
            f"an encrypted PDF that needs a cryptography library ({err}); "
            "pip install 'pypdf[crypto]' and index it again"
        ) from None
    except FileNotDecryptedError:
        raise Unreadable(
            "a password-protected PDF; save a copy without the password, or export its text"
        ) from None
    except broken as err:
        raise Unreadable(
            f"not a readable PDF ({type(err).__name__}: {err}); open and re-save it as PDF, "
            "or export its text"
        ) from None
    if failed and notes is not None:
        numbers = ", ".join(str(n) for n, _ in failed[:10]) + (" ..." if len(failed) > 10 else "")
        first, pages = failed[0][1], "pages" if len(failed) > 1 else "page"
        notes.append(
            f"{pages} {numbers} of {len(texts)} not read ({type(first).__name__}: {first}), "
            "the other pages indexed; open and re-save it as PDF, or export those pages' text"
        )
    # a NUL or lone surrogate in extracted text is the extractor's (an unmapped glyph), not
    # the document's: a space or U+FFFD in its place keeps every offset
    texts = [_LONE_SURROGATE.sub("\ufffd", text.replace("\x00", " ")) for text in texts]
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
    try:  # (a stray byte here is the line reader's to name, with its line)
        with opener(path, "rb") as f:
            head = f.read(1 << 16).decode("utf-8", errors="replace").lstrip("\ufeff")
    except (OSError, EOFError, zlib.error) as err:
        raise Unreadable(f"cannot be read ({type(err).__name__}: {err})") from None
    lines = [line for line in head.splitlines()[:5] if line.strip()]
    # a BEIR corpus: records of one line each, with an _id (a bad first line is skipped later)
    if lines and lines[0].lstrip()[:1] == "{" and any('"_id"' in line for line in lines):
        if path.name.lower().startswith("queries"):  # BEIR's questions, beside its corpus
            raise Unreadable(
                "a BEIR queries file (its questions, not documents); index the corpus alone, "
                "and give this file to `structqa evaluate-retrieval --queries`"
            )
        return _beir(path, notes)
    try:
        contexts = _qa_contexts(path, notes)
    except DataError as err:
        if err.field_name not in ("(file)", "(encoding)"):
            raise Unreadable(
                f"neither a BEIR corpus nor a SQuAD/MRQA/flat SQuAD file ({err})"
            ) from None
        where = "" if err.record == "(file)" else f"{err.record}: "  # (a .gz cut short)
        raise Unreadable(f"{where}{err.problem}") from None
    except (ValueError, OSError, EOFError, zlib.error) as err:  # (a .gz cut short, too)
        raise Unreadable(
            f"neither a BEIR corpus nor a SQuAD/MRQA/flat SQuAD file ({err})"
        ) from None
    docs: dict[str, Document] = {}
    for title, context in contexts:
        key = context_key(context)
        if key not in docs:
            title = title or f"{path.stem} context {len(docs) + 1}"
            docs[key] = Document(f"{path}#{key}", str(path), title, context)
    if not docs:
        raise Unreadable("no contexts")
    return list(docs.values())


def _qa_contexts(path: Path, notes: list[str] | None) -> list[tuple[str, str]]:
    """(title, context) of every passage of a SQuAD/MRQA file, read from the passages alone:
    a passage is a document whether or not its questions are well formed (a repeated
    question id once cost a whole file, a passage without questions went missing). A
    passage that is not valid text is skipped and named in ``notes``."""
    from structqa.data.readers import detect_format
    from structqa.data.squad import load_json, starts_with

    kind = detect_format(path)
    found: list[tuple[str, str, str]] = []  # (where, title, context)
    if kind == "squad":
        doc = load_json(path)
        data = doc.get("data") if isinstance(doc, dict) else None
        for i, article in enumerate(data if isinstance(data, list) else []):
            if not isinstance(article, dict):
                continue
            title = article.get("title") if isinstance(article.get("title"), str) else ""
            paragraphs = article.get("paragraphs")
            for j, paragraph in enumerate(paragraphs if isinstance(paragraphs, list) else []):
                context = paragraph.get("context") if isinstance(paragraph, dict) else None
                found.append((f"data[{i}].paragraphs[{j}]", title, context))
    elif kind == "mrqa":
        for where, record in _json_lines(path, notes):
            if not (isinstance(record, dict) and "header" in record):
                found.append((where, "", _context(record)))
    elif kind == "flat":  # Hugging Face's SQuAD records: a JSON list, or one a line
        if starts_with(path, b"["):
            doc = load_json(path)
            records = enumerate(doc if isinstance(doc, list) else [])
            found.extend((f"record {i}", _title(r), _context(r)) for i, r in records)
        else:
            found.extend((w, _title(r), _context(r)) for w, r in _json_lines(path, notes))
    else:
        raise ValueError(f"a {kind} file")
    contexts, bad = [], []
    for where, title, context in found:
        if context is _NOT_A_RECORD:
            problem = "not a JSON record"
        else:
            problem = "no context" if not isinstance(context, str) else text_problem(context)
        if problem is None and context.strip():
            contexts.append((title, context))
        elif problem is not None:
            bad.append(f"{where} ({problem})")
    if bad and notes is not None:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        notes.append(f"{len(bad)} passage(s) skipped: {', '.join(bad[:5])}{more}")
    return contexts


def _json_lines(path: Path, notes: list[str] | None) -> Iterator[tuple[str, object]]:
    """(``line N``, its record) of each non-blank line; a line that is not JSON (or nested
    too deeply to parse) is ``None``, a passage without a context that the caller names.
    Bytes that are not UTF-8 are read as U+FFFD, their lines named in ``notes``."""
    mended: list[int] = []
    for lineno, line in file_lines(path, mended):
        if line.strip():
            try:
                yield f"line {lineno}", json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                yield f"line {lineno}", None
    _note_mended(mended, notes)


def _note_mended(mended: list[int], notes: list[str] | None) -> None:
    if mended and notes is not None:
        shown = ", ".join(map(str, mended[:10])) + (" ..." if len(mended) > 10 else "")
        notes.append(
            f"{len(mended)} line(s) not valid UTF-8, read with U+FFFD for the bytes that are "
            f"not (lines {shown}); save the file as UTF-8 to keep those characters"
        )


def _title(record: object) -> str:
    title = record.get("title") if isinstance(record, dict) else None
    return title if isinstance(title, str) else ""


def _context(record: object) -> object:
    if not isinstance(record, dict):
        return _NOT_A_RECORD
    return record.get("context")


def _field(record: dict, name: str) -> str:
    """A BEIR record's text field: a string, or missing or null (empty)."""
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"its {name} is a {type(value).__name__}, not a string")
    return value


def _beir(path: Path, notes: list[str] | None = None) -> list[Document]:
    """A BEIR corpus; a line that is not a record is skipped and named in ``notes`` (one bad
    line in a corpus of thousands once lost the whole file), a file with none is unreadable."""
    docs: list[Document] = []
    bad: list[int] = []
    empty: list[int] = []  # records with neither a title nor a text
    fields: set[str] = set()
    first_error = ""
    lineno = 0
    mended: list[int] = []
    try:
        for lineno, line in file_lines(path, mended):  # noqa: B007 (named in the error)
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if isinstance(rec, dict):
                    fields.update(map(str, rec))
                doc_id, text, title = str(rec["_id"]), _field(rec, "text"), _field(rec, "title")
                for name, value in (("title", title), ("text", text)):
                    if (problem := text_problem(value)) is not None:
                        raise ValueError(f"its {name} contains {problem}")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                bad.append(lineno)
                first_error = first_error or f"line {lineno}: {type(err).__name__} {err}"
                continue
            full = "\n\n".join(part for part in (title, text) if part.strip())
            if full.strip():
                docs.append(Document(doc_id, str(path), title, full))
            else:
                empty.append(lineno)
    # damage past the part read to recognise the format: a truncated .gz
    except (OSError, DataError) as err:
        why = err.problem if isinstance(err, DataError) else f"{type(err).__name__}: {err}"
        raise Unreadable(
            f"unreadable after line {lineno} ({why}); fix or re-download the file"
        ) from None
    if bad and not docs:
        raise Unreadable(f"no line is a corpus record ({first_error})")
    _note_mended(mended, notes)
    if empty and not docs:
        raise Unreadable(
            f"no record has a title or a text ({len(empty)} records with the fields "
            f"{', '.join(sorted(fields)[:12])}); a BEIR corpus record needs _id and text"
        )
    if empty and notes is not None:
        notes.append(
            f"{len(empty)} record(s) with neither a title nor a text, skipped (the first on "
            f"line {empty[0]})"
        )
    if bad and notes is not None:
        shown = ", ".join(map(str, bad[:10])) + (
            f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        )
        notes.append(
            f"{len(bad)} line(s) not corpus records, skipped: {shown} ({first_error}); "
            "each record needs an _id and a text (a string of valid Unicode)"
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
    i, overlapping = 0, False
    while i < len(pieces):
        j, used = i, 0
        while j < len(pieces) and used + pieces[j][2] <= max_tokens:
            used += pieces[j][2]
            j += 1
        j = max(j, i + 1)
        if overlapping and j == i + 1:  # the boundary sentence alone: a copy of the last
            i, overlapping = i + 1, False  # chunk's end, so the next chunk starts after it
            continue
        a, b = pieces[i][0], pieces[j - 1][1]
        chunks.append(Chunk(doc.doc_id, a, b, doc.text[a:b], doc.page_at(a)))
        if j >= len(pieces):
            break
        overlapping = j - 1 > i  # overlap: the boundary sentence opens the next chunk
        i = j - 1 if overlapping else j
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
            out += _fit(text, s, e, count_tokens([text[s:e]])[0], count_tokens, max_tokens)
    return out


def _fit(
    text: str, a: int, b: int, n: int, count: Callable[[Sequence[str]], list[int]], limit: int
) -> list[tuple[int, int, int]]:
    """``text[a:b]`` (``n`` tokens) as pieces of at most ``limit`` tokens: halved at the space
    nearest its middle, else at its middle character (text without spaces, a long token)."""
    if n <= limit or b - a < 2:
        return [(a, b, n)]
    middle = (a + b) // 2
    spaces = [m.start() + a for m in re.finditer(r"\s+", text[a:b])]
    cut = min(spaces, key=lambda i: abs(i - middle)) if spaces else middle
    if not a < cut < b:
        cut = middle
    left, right = (a, cut), (cut, b)
    while left[1] > left[0] and text[left[1] - 1].isspace():
        left = (left[0], left[1] - 1)
    while right[0] < right[1] and text[right[0]].isspace():
        right = (right[0] + 1, right[1])
    out = []
    for s, e in (left, right):
        if e > s:
            out += _fit(text, s, e, count([text[s:e]])[0], count, limit)
    return out


def read_all(paths: Iterable[Path], report: ReadReport) -> Iterator[tuple[Path, list[Document]]]:
    """Each readable file with its documents; the others are counted in ``report``."""
    for path in paths:
        notes: list[str] = []
        try:
            docs = read_documents(path, notes)
        except Empty as err:  # (a file with no text: an index drops what it held of it)
            report.skipped.append((str(path), str(err)))
            report.empty.append(str(path))
            continue
        except (Unreadable, OSError) as err:
            report.skipped.append((str(path), str(err)))
            continue
        except Exception as err:  # a reader's failure on one file is that file's alone
            log.debug("%s: not read", path, exc_info=True)
            why = f"{type(err).__name__}: {err}"
            report.skipped.append((str(path), f"not read ({why}); save it again, or as text"))
            continue
        finally:
            report.notes += [(str(path), note) for note in notes]
        report.files += 1
        report.documents += len(docs)
        yield path, docs
