"""Character spans of a text cut at a pattern's matches (sentence splitting without a parser)."""

from __future__ import annotations

import re


def pieces(text: str, boundary: re.Pattern[str]) -> list[tuple[int, int]]:
    """The (start, end) character spans of ``text`` between the matches of ``boundary``, in
    order; empty ones included (callers drop or trim them as their text needs)."""
    spans, start = [], 0
    for m in boundary.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return spans
