"""Numbers in text: where they are, GenBERT digit tokenization, LSDF answer targets.

Three pieces NC-BERT (and GenBERT before it) needs:

- :func:`find_numbers` locates numbers with exact char offsets and parses their values.
- :func:`digit_tokenize` tokenizes a text with WordPiece except that every number is split into
  one token per character, digits continuing a digit run marked ``##`` ("1234" -> 1 ##2 ##3 ##4),
  so the encoder sees digits, never multi-digit pieces.
- :func:`lsdf` / :func:`from_lsdf` write an answer number least significant digit first
  (127 -> 7 2 1) for the decoder and read it back.

What counts as a number (digits; ``words=True`` adds number words):

- A run of ASCII digits with no word character (letter, digit, ``_``) or ``.`` directly before
  it and no word character after it. So "3rd", "1990s", "A380", "10am" are not numbers:
  digits glued to letters are ordinals, decades, names or units, not quantities, and GenBERT
  leaves them to WordPiece too. "45-yard" and "24-17" are numbers (45; 24 and 17).
- Thousands separators: ``,`` followed by exactly three digits, every group ("14,506" ->
  14506, "1,234,567.5" -> 1234567.5). "1,2,3" is three numbers, since a group must have three
  digits; a list of three-digit numbers written without spaces ("100,200") is read as one
  number, as there is no way to tell them apart.
- A decimal part: ``.`` followed by digits ("3.5"). A number needs a leading digit (".5" is
  not read), and dotted runs such as "1.2.3" (versions, addresses) are not numbers at all.
- A leading minus (``-`` or U+2212) when the sign is not preceded by a word character:
  "-7" and "(-7)" are negative; in "24-17" and "pre-1990" the hyphen is a dash.
- Percentages: a number followed by "%" (optionally after one space) or by "percent" /
  "per cent" has ``is_percent`` set; its value stays the written number (45% -> 45.0) and its
  span does not include the sign or the word.
- Number words (``words=True``): zero..nineteen, the tens, "hundred" and the scales thousand,
  million, billion, trillion, combined as written English combines them ("twenty-one",
  "two hundred and five", "three thousand four hundred"). Words that do not combine are
  separate numbers ("one two" -> 1, 2). A digit number followed by scale words ("2.5 million")
  is one number (2500000). Ordinal words ("third", "twenty-first") are not numbers, for the
  same reason as "3rd". Only digits are split into tokens; number words stay WordPiece.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class NumberSpan:
    """A number at ``text[start:end]`` (``text`` holds exactly those characters)."""

    start: int
    end: int
    value: float
    text: str
    is_percent: bool = False
    is_word: bool = False  # written (at least partly) in words


# -- digits -----------------------------------------------------------------------------------

_MINUS = "-\u2212"
_DIGIT_NUMBER = re.compile(
    rf"""
    (?<![\w.])                        # nothing glued on the left (also no '.': "1.2.3")
    (?P<sign>[{_MINUS}])?
    (?<![\w.])                        # with a sign this sees the sign, and passes
    (?P<int>
        [0-9]{{1,3}}(?:,[0-9]{{3}})+(?!,?[0-9])   # thousands groups of exactly three digits
      | [0-9]+
    )
    (?P<frac>\.[0-9]+)?
    (?!\w)(?!\.[0-9])                 # nothing glued on the right, no second '.' group
    """,
    re.VERBOSE,
)
_PERCENT_AFTER = re.compile(r"\s?%|\s+per\s?cent\b", re.IGNORECASE)


def _digit_numbers(text: str) -> list[NumberSpan]:
    out = []
    for m in _DIGIT_NUMBER.finditer(text):
        written = m.group()
        value = float(written.replace(",", "").replace("\u2212", "-"))
        out.append(NumberSpan(m.start(), m.end(), value, written))
    return out


# -- number words -----------------------------------------------------------------------------

_UNITS = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_WORD_VALUE: dict[str, int] = {
    **{w: i for i, w in enumerate(_UNITS)},
    **{w: 10 + i for i, w in enumerate(_TEENS)},
    **{w: 20 + 10 * i for i, w in enumerate(_TENS)},
    "hundred": 100,
    **_SCALES,
}
_ORDINAL_UNITS = "first second third fourth fifth sixth seventh eighth ninth".split()
_NUMBER_WORD = re.compile(
    r"\b(?:" + "|".join(sorted(_WORD_VALUE, key=len, reverse=True)) + r")\b"
    r"(?!-(?:" + "|".join(_ORDINAL_UNITS) + r")\b)",  # "twenty-first" is an ordinal
    re.IGNORECASE,
)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


def _category(word: str) -> str:
    v = _WORD_VALUE[word]
    if word in _SCALES:
        return "scale"
    if word == "hundred":
        return "hundred"
    if v == 0:
        return "zero"
    return "unit" if v < 10 else "teen" if v < 20 else "tens"


@dataclass
class _WordNumber:
    """A number being read from words: ``total`` of closed scale groups + the open group."""

    start: int
    end: int
    total: int = 0
    current: int = 0  # the open group, below 1000
    last: str = ""  # category of the last word
    last_scale: int = 0  # scale of the last closed group (0: none yet)
    group_hundred: bool = False  # the open group already has its "hundred"
    scales_only: bool = True  # only "hundred"/scale words: may multiply a digit number

    def accepts(self, word: str, sep: str) -> bool:
        """Whether ``word``, after separator ``sep``, continues this number."""
        word = word.lower()
        cat, prev = _category(word), self.last
        if sep == "hyphen":
            return prev == "tens" and cat == "unit"
        if sep == "and":
            return prev in ("hundred", "scale") and cat in ("unit", "teen", "tens")
        if sep != "space":
            return False
        if cat == "scale":
            smaller = self.last_scale == 0 or _SCALES[word] < self.last_scale
            return prev in ("unit", "teen", "tens", "hundred") and smaller
        if cat == "hundred":
            return prev in ("unit", "teen") and not self.group_hundred
        if cat == "unit":
            return prev in ("tens", "hundred", "scale")
        if cat in ("teen", "tens"):
            return prev in ("hundred", "scale")
        return False

    def add(self, word: str, end: int) -> None:
        word = word.lower()
        cat, value = _category(word), _WORD_VALUE[word]
        if cat == "hundred":
            self.current = (self.current or 1) * 100
            self.group_hundred = True
        elif cat == "scale":
            self.total += (self.current or 1) * value
            self.current, self.last_scale, self.group_hundred = 0, value, False
        else:
            self.current += value
            self.scales_only = False
        self.last, self.end = cat, end

    @property
    def value(self) -> int:
        return self.total + self.current


def _separator(gap: str) -> str:
    if gap == "-":
        return "hyphen"
    if _AND.fullmatch(gap):
        return "and"
    return "space" if gap and gap.isspace() else "other"


def _word_numbers(text: str) -> list[_WordNumber]:
    out: list[_WordNumber] = []
    for m in _NUMBER_WORD.finditer(text):
        if out and out[-1].accepts(m.group(), _separator(text[out[-1].end : m.start()])):
            out[-1].add(m.group(), m.end())
            continue
        number = _WordNumber(m.start(), m.end())
        number.add(m.group(), m.end())
        out.append(number)
    return out


# -- find_numbers -----------------------------------------------------------------------------


def find_numbers(text: str, words: bool = False) -> list[NumberSpan]:
    """Every number in ``text``, in order, with exact char offsets (see the module docs for
    what counts as a number). ``words`` also reads numbers written in words."""
    spans = _digit_numbers(text)
    if words:
        spans = _merge_words(text, spans, _word_numbers(text))
    return [replace(s, is_percent=_PERCENT_AFTER.match(text, s.end) is not None) for s in spans]


def _merge_words(
    text: str, digits: list[NumberSpan], worded: list[_WordNumber]
) -> list[NumberSpan]:
    """Add word numbers; scale words right after a digit number multiply it ("2.5 million")."""
    by_end = {s.end: i for i, s in enumerate(digits)}
    merged = list(digits)
    for w in worded:
        before = w.start  # back over the whitespace before the words
        while before > 0 and text[before - 1].isspace():
            before -= 1
        i = by_end.get(before)
        if i is not None and before < w.start and w.scales_only:
            d = merged[i]
            value = float(Decimal(d.text.replace(",", "").replace("\u2212", "-")) * w.value)
            merged[i] = NumberSpan(d.start, w.end, value, text[d.start : w.end], is_word=True)
        else:
            written = text[w.start : w.end]
            merged.append(NumberSpan(w.start, w.end, float(w.value), written, is_word=True))
    return sorted(merged, key=lambda s: s.start)


# -- digit tokenization -----------------------------------------------------------------------


class WordPieceTokenizer(Protocol):
    """What :func:`digit_tokenize` needs of an HF fast tokenizer."""

    unk_token_id: int

    def __call__(self, text: list[str], **kwargs: object) -> dict: ...

    def convert_tokens_to_ids(self, tokens: str) -> int: ...

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]: ...


@dataclass(frozen=True)
class DigitTokens:
    """A text tokenized with digits split. ``offsets[t]`` is the (start, end) char span of
    token t; ``number_index[t]`` indexes ``numbers`` for tokens of a number, else -1."""

    input_ids: np.ndarray  # (T,) int64
    offsets: np.ndarray  # (T, 2) int64
    is_number_token: np.ndarray  # (T,) bool
    number_index: np.ndarray  # (T,) int64
    numbers: tuple[NumberSpan, ...]

    def __len__(self) -> int:
        return len(self.input_ids)


def _char_pieces(chars: str, continues: bool = False) -> list[str]:
    """One piece per char; a digit right after a digit continues the run (``##``), and so
    does the first char when ``continues`` (it carries on a word piece)."""
    return [
        "##" + c
        if (i > 0 and c.isdigit() and chars[i - 1].isdigit()) or (i == 0 and continues)
        else c
        for i, c in enumerate(chars)
    ]


class _Vocab:
    """Piece -> id with the digit pieces checked up front."""

    def __init__(self, tokenizer: WordPieceTokenizer):
        self.tokenizer = tokenizer
        self.ids: dict[str, int] = {}
        for d in "0123456789":
            for piece in (d, "##" + d):
                i = tokenizer.convert_tokens_to_ids(piece)
                if i is None or i == tokenizer.unk_token_id:
                    raise ValueError(f"the tokenizer's vocabulary has no piece {piece!r}")
                self.ids[piece] = int(i)

    def __getitem__(self, piece: str) -> int:
        if piece not in self.ids:  # signs and separators; [UNK] as the tokenizer would give
            i = self.tokenizer.convert_tokens_to_ids(piece)
            self.ids[piece] = self.tokenizer.unk_token_id if i is None else int(i)
        return self.ids[piece]


def digit_tokenize(text: str, tokenizer: WordPieceTokenizer) -> DigitTokens:
    """Tokenize ``text`` (no special tokens) the GenBERT way.

    Every number of :func:`find_numbers` (digits only) becomes one token per character:
    digits, and its sign, thousands commas and decimal point as plain tokens; a digit after
    a digit gets ``##``. So "-1,234.5" -> ``- 1 , 2 ##3 ##4 . 5``, which is what GenBERT gets
    from BERT's punctuation split followed by its digit split. The text between numbers goes
    through the tokenizer; an all-digit piece there ("1990" of "1990s") is split the same way,
    as GenBERT does, but is not a number token. Every token's offsets are exact: a digit token
    covers its one char.
    """
    vocab = _Vocab(tokenizer)
    numbers = tuple(find_numbers(text))
    bounds = [0] + [x for n in numbers for x in (n.start, n.end)] + [len(text)]
    gaps = list(zip(bounds[::2], bounds[1::2], strict=True))  # the text around the numbers
    enc = tokenizer(
        [text[a:b] for a, b in gaps], add_special_tokens=False, return_offsets_mapping=True
    )
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    number_index: list[int] = []

    def emit_chars(start: int, chars: str, index: int, continues: bool = False) -> None:
        for k, piece in enumerate(_char_pieces(chars, continues)):
            ids.append(vocab[piece])
            offsets.append((start + k, start + k + 1))
            number_index.append(index)

    for g, (gap_start, _) in enumerate(gaps):
        gap_ids = enc["input_ids"][g]
        for tid, piece, (s, e) in zip(
            gap_ids,
            tokenizer.convert_ids_to_tokens(gap_ids),
            enc["offset_mapping"][g],
            strict=True,
        ):
            digits = piece.removeprefix("##")
            if len(digits) > 1 and digits.isdigit() and digits.isascii() and e - s == len(digits):
                emit_chars(gap_start + s, digits, -1, continues=piece.startswith("##"))
            else:
                ids.append(int(tid))
                offsets.append((gap_start + s, gap_start + e))
                number_index.append(-1)
        if g < len(numbers):
            emit_chars(numbers[g].start, numbers[g].text, g)
    index = np.asarray(number_index, dtype=np.int64)
    return DigitTokens(
        input_ids=np.asarray(ids, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
        is_number_token=index >= 0,
        number_index=index,
        numbers=numbers,
    )


# -- LSDF -------------------------------------------------------------------------------------

_PLAIN_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def is_plain_number(text: str) -> bool:
    """Whether ``text`` is written as a plain number (``-?digits[.digits]``): what
    :func:`lsdf` writes and :func:`from_lsdf` reads back."""
    return _PLAIN_NUMBER.fullmatch(text) is not None


def number_text(value: int | float | str) -> str:
    """The plain written form of a number: no exponent, no thousands commas, an integral
    float without ".0" (12.0 -> "12"); floats use their shortest round-trip digits, so
    ``float(number_text(x)) == x``. A string must already be plain (``-?digits[.digits]``)."""
    if isinstance(value, str):
        if not _PLAIN_NUMBER.fullmatch(value):
            raise ValueError(f"not a plain number: {value!r} (expected -?digits[.digits])")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        if value.is_integer():
            return str(int(value))
        return format(Decimal(repr(value)), "f")  # repr: shortest digits that round-trip
    return str(int(value))


def lsdf(value: int | float | str, wordpiece: bool = False) -> list[str]:
    """Least-significant-digit-first tokens of a number: 127 -> ["7", "2", "1"].

    The paper reverses the number's written digits (127 -> 721). For a decimal the whole
    digit string is reversed, decimal point included (12.5 -> 5 . 2 1), which is still least
    significant first: tenths, then units, then tens. A minus sign stays first (-127 ->
    - 7 2 1) so the decoder commits to the sign before the digits. With ``wordpiece``, a digit
    after a digit gets ``##`` as in :func:`digit_tokenize` (``7 ##2 ##1``).
    """
    text = number_text(value)
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    chars = sign + digits[::-1]
    return _char_pieces(chars) if wordpiece else list(chars)


def from_lsdf(tokens: Sequence[str]) -> str:
    """The written number from :func:`lsdf` tokens (``##`` prefixes allowed): the inverse of
    :func:`lsdf` on its own output. Raises ValueError for a sequence that is not a number."""
    chars = "".join(t.removeprefix("##") for t in tokens)
    sign, digits = ("-", chars[1:]) if chars.startswith("-") else ("", chars)
    text = sign + digits[::-1]
    if "-" in digits or not _PLAIN_NUMBER.fullmatch(text):
        raise ValueError(f"LSDF tokens {list(tokens)!r} do not spell a number")
    return text
