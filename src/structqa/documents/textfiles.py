"""Text and HTML files as text: the encoding by byte-order mark, declared charset, UTF-8 or
its fallbacks (each fallback noted), and an HTML page's visible text."""

from __future__ import annotations

import codecs
import html.parser
import re
from pathlib import Path

ENCODINGS = ("utf-8", "cp1252")  # tried in order; then Latin-1, which reads any byte


class Unreadable(ValueError):
    """A file that cannot be read as a document, and why."""


class Empty(Unreadable):
    """A file without any text: no document, and a real change to a file indexed before (its
    chunks go, where an unreadable file keeps the version indexed earlier)."""


def decode(path: Path, notes: list[str] | None, html: bool = False) -> str:
    """A text file's text: by its byte-order mark, else (``html``) the charset its page
    declares, else UTF-8, mended UTF-8, cp1252 or Latin-1, each fallback noted."""
    data = path.read_bytes()
    if not data.strip():
        raise Empty("empty file")
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
                if encoding != "utf-8":
                    raise Unreadable(f"starts as {encoding} text but is not ({err})") from None
                # UTF-8 with a stray byte reads as it does without the mark
                text = data[len(bom) :].decode("utf-8", errors="replace")
                _note_mended(data[len(bom) :], text, err.start + len(bom), notes)
            if encoding != "utf-8" and notes is not None:
                notes.append(f"read as {encoding.upper()} (its byte-order mark)")
            if not text.strip():
                raise Empty("empty file")
            return text
    if b"\x00" in data[:4096]:
        raise Unreadable("binary content (NUL bytes), not text")
    declared = _declared_charset(data) if html else None
    if declared is not None and declared != "utf-8":
        try:
            return data.decode(declared)
        except UnicodeError as err:  # (a codec such as idna fails with a plain UnicodeError)
            at = f" at byte {err.start}" if isinstance(err, UnicodeDecodeError) else ""
            reason = err.reason if isinstance(err, UnicodeDecodeError) else str(err)
            if notes is not None:
                notes.append(f"declares {declared} but is not ({reason}{at})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        first = err.start
    said = notes if notes is not None else []
    mended = data.decode("utf-8", errors="replace")
    if any(ord(c) > 127 and c != "\ufffd" for c in mended):
        # UTF-8 text with a few stray bytes (a Latin-1 character pasted in): read as UTF-8,
        # the stray bytes shown as U+FFFD, rather than the whole file misread as cp1252
        _note_mended(data, mended, first, said)
        return mended
    for encoding in ENCODINGS[1:]:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        said.append(f"not UTF-8; read as {encoding} (Latin-1 and Windows text)")
        return text
    said.append("not UTF-8 nor cp1252; read as Latin-1 (ISO 8859-1), which reads any byte")
    return data.decode("latin-1")


def _note_mended(data: bytes, mended: str, first: int, notes: list[str] | None) -> None:
    """Note that ``data``, UTF-8 but for some byte sequences, was read as ``mended`` (U+FFFD
    for those): ``first`` is where the first lies in the file (its byte-order mark counted)."""
    if notes is not None:
        bad = mended.count("\ufffd") - data.count("\ufffd".encode())
        notes.append(
            f"UTF-8 with {bad} byte sequence(s) that are not, read as U+FFFD (the first at "
            f"byte {first}); save the file as UTF-8 to keep those characters"
        )


_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE
)


def _declared_charset(data: bytes) -> str | None:
    """The Python codec of the charset an HTML page declares in a ``<meta>`` of its first
    2 KiB (``charset=`` or ``http-equiv`` content), or None. As browsers do (WHATWG), a page
    declaring Latin-1 or ASCII is read as cp1252, their superset, and one declaring UTF-16 or
    UTF-32 without their byte-order mark as UTF-8 (a page that could be read this far as
    bytes of ASCII is not UTF-16)."""
    found = _META_CHARSET.search(data[:2048])
    if found is None:
        return None
    try:
        codec = codecs.lookup(found.group(1).decode("ascii"))
    except LookupError:
        return None
    # a bytes-to-bytes codec (hex, base64, rot13) is no charset: CPython marks text codecs
    if not getattr(codec, "_is_text_encoding", True):
        return None
    name = codec.name
    if name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return "cp1252" if name in ("latin-1", "iso8859-1", "ascii") else name


class _TextOf(html.parser.HTMLParser):
    """The visible text of an HTML page: no scripts or styles, blocks on lines of their own,
    a table's cells apart (``a | b``: glued cells once read as one word)."""

    BLOCKS = frozenset(
        "p div br li h1 h2 h3 h4 h5 h6 tr section article header footer nav aside main "
        "table thead tbody tfoot caption ul ol dl dt dd blockquote pre figure figcaption hr "
        "title address details summary form fieldset".split()
    )
    CELLS = frozenset(("td", "th"))

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.cells = 0  # cells opened in the current row

    def handle_starttag(self, tag: str, attrs) -> None:  # noqa: ARG002
        if tag in ("script", "style", "noscript"):
            self.hidden += 1
        elif tag in self.CELLS:
            self.parts.append(" | " if self.cells else " ")
            self.cells += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n\n")
            self.cells = 0

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript"):
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.CELLS:
            self.parts.append(" ")
        elif tag in self.BLOCKS:
            self.parts.append("\n\n")
            self.cells = 0

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(source: str) -> str:
    """The visible text of an HTML page, or :class:`Unreadable` where the standard library's
    parser gives up on it (a malformed ``<![`` section, say)."""
    parser = _TextOf()
    try:
        parser.feed(source)
        parser.close()
    except (AssertionError, ValueError) as err:
        raise Unreadable(
            f"HTML the parser cannot read ({type(err).__name__}: {err}); open it in a browser "
            "and save it again, or save its text"
        ) from None
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r" *\n\s*\n\s*", "\n\n", text).strip()
