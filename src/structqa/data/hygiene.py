"""Which text structqa accepts: valid Unicode without NUL characters, at every edge.

The rule (the same for dataset files, ``predict``, the Python ``Predictor`` and the HTTP
service): a question, context or passage holding a NUL (U+0000) or a lone surrogate
(U+D800 to U+DFFF) is rejected with a message naming where, never repaired. A lone surrogate
is half of a UTF-16 pair: JSON can spell it (``"\\ud800"``) and Python reads such text, but
it is no character, cannot be written as UTF-8 and makes the tokenizer fail; NUL ends strings
in C libraries and is never part of a real passage. Both mean the text was damaged on its way
(a cut UTF-16 pair, bytes that were not UTF-8), so no replacement would be the text the user
meant.
"""

from __future__ import annotations

import re
import unicodedata

_INVALID = re.compile("[\x00\ud800-\udfff]")


class InvalidText(ValueError):
    """Text that breaks the rule above; the message names the text and the offending char."""


def text_problem(text: str) -> str | None:
    """What breaks the rule in ``text`` (the first offence, with its char offset), or None."""
    found = _INVALID.search(text)
    if found is None:
        return None
    char, at = found.group(), found.start()
    if char == "\x00":
        return f"a NUL character (U+0000) at offset {at}"
    return (
        f"a lone surrogate U+{ord(char):04X} at offset {at}, which is not valid Unicode (half "
        "of a UTF-16 pair, e.g. a JSON \\ud800 escape, or bytes that were not UTF-8)"
    )


def check_text(text: str, what: str) -> str:
    """Return ``text`` if it follows the rule, else raise :class:`InvalidText` naming ``what``."""
    problem = text_problem(text)
    if problem is not None:
        raise InvalidText(f"{what} contains {problem}; send valid UTF-8 text without it")
    return text


# what a WordPiece tokenizer drops before it splits words: control and format characters
# (zero-width spaces, a byte-order mark), combining marks with nothing to combine with (an
# uncased model strips accents), U+FFFD, and whitespace (every space is Cc, Zs, Zl or Zp)
_UNREAD = frozenset(("Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"))


_ASCII_VISIBLE = re.compile(r"[!-~]")


def has_readable_text(text: str) -> bool:
    """Whether ``text`` holds a character a model reads: text of only spaces, zero-width,
    control or combining characters becomes no token, and an answer to it is noise. (A
    visible ASCII character is looked for first, and spaces stripped, both at C speed: a
    service checks bodies of megabytes of spaces before it measures them.)"""
    if _ASCII_VISIBLE.search(text):
        return True
    return any(ch != "\ufffd" and unicodedata.category(ch) not in _UNREAD for ch in text.strip())
