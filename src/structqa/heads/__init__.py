"""Span heads behind one interface, built by name from a small registry."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from structqa.heads.base import HeadOutput, SpanHead
from structqa.heads.independent import IndependentHead

HEADS: dict[str, Callable[..., SpanHead]] = {
    "independent": lambda hidden, **kw: IndependentHead(hidden),
}


def build_head(name: str, hidden: int, **kwargs) -> SpanHead:
    if name not in HEADS:
        close = difflib.get_close_matches(name, HEADS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown head {name!r}{hint} (known: {', '.join(sorted(HEADS))})")
    return HEADS[name](hidden, **kwargs)


__all__ = ["HEADS", "HeadOutput", "IndependentHead", "SpanHead", "build_head"]
