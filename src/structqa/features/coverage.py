"""A check that a tokenizer's overflowing windows cover every text they were cut from.

A long context is read as windows that the tokenizer returns (``return_overflowing_tokens``).
tokenizers 0.23.1 and 0.23.2 stop tokenizing at the window length and return too few windows
(huggingface/tokenizers#2091): a 5,000-token article then comes back as its first two windows,
and training, evaluation and answers silently see the start of each document alone. Rather
than trusting the version, the windows are checked against the text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_NAMED = 3
BROKEN_TOKENIZERS = ("0.23.1", "0.23.2")


class WindowsLoseText(RuntimeError):
    """The tokenizer's windows end before the text does."""


def _lost(text: str, covered_end: int) -> bool:
    # characters a tokenizer may drop at the end (spaces, control and format characters,
    # punctuation the normalizer strips) are no loss; a letter or digit is
    return any(ch.isalnum() for ch in text[max(covered_end, 0) :])


def covered_ends(samples: Sequence[int], offsets: Sequence[np.ndarray], count: int) -> list[int]:
    """The furthest character each of ``count`` texts' windows reach: ``samples[f]`` is window
    f's text, ``offsets[f]`` its (N, 2) character offsets with -1 where a token is not of it."""
    ends = [-1] * count
    for sample, off in zip(samples, offsets, strict=True):
        if len(off):
            ends[sample] = max(ends[sample], int(np.max(off[:, 1])))
    return ends


def check_covered(texts: Sequence[str], ends: Sequence[int], names: Sequence[str]) -> None:
    """Raise :class:`WindowsLoseText` naming the texts whose windows stop before their last
    letter or digit (``ends`` from :func:`covered_ends`), and what to do."""
    short = [i for i, (t, e) in enumerate(zip(texts, ends, strict=True)) if _lost(t, e)]
    if not short:
        return
    try:
        import tokenizers

        version = tokenizers.__version__
    except ImportError:  # a slow (pure Python) tokenizer
        version = "not installed"
    named = ", ".join(
        f"{names[i]} (to character {max(ends[i], 0):,} of {len(texts[i]):,})"
        for i in short[:_NAMED]
    )
    more = f" and {len(short) - _NAMED} more" if len(short) > _NAMED else ""
    remedy = (
        f"tokenizers {version} is one of the releases that return too few windows "
        f"({', '.join(BROKEN_TOKENIZERS)}): pip install 'tokenizers!=0.23.1,!=0.23.2'"
        if version in BROKEN_TOKENIZERS
        else f"tokenizers is {version}; try another release of it or of transformers"
    )
    raise WindowsLoseText(
        f"the tokenizer's windows stop before the end of {len(short)} of {len(texts)} texts: "
        f"{named}{more}. Their rest would go unread; {remedy}"
    )
