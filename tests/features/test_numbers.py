"""Numbers in text: spans and values, GenBERT digit tokenization, LSDF targets."""

from __future__ import annotations

import json
import re
import unicodedata
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from structqa.features.numbers import (
    DigitTokens,
    NumberSpan,
    digit_tokenize,
    find_numbers,
    from_lsdf,
    lsdf,
    number_text,
)

DROP_FILES = ("drop/drop-mini.json", "drop/drop-train-sample.json")


@pytest.fixture(scope="module")
def passages(shared_data: Path) -> dict[str, str]:
    out = {}
    for name in DROP_FILES:
        for pid, record in json.loads((shared_data / name).read_text(encoding="utf-8")).items():
            out[pid] = record["passage"]
    return out


@pytest.fixture(scope="module")
def tokenizer():
    """The bundled all-MiniLM-L6-v2 tokenizer (uncased BERT WordPiece)."""
    from structqa.models.build import load_tokenizer
    from structqa.paths import default_encoder_path

    try:
        path = default_encoder_path()
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(f"bundled encoder not available: {err}")
    return load_tokenizer(path)


def values(text: str, words: bool = False) -> list[float]:
    return [n.value for n in find_numbers(text, words=words)]


def texts(text: str, words: bool = False) -> list[str]:
    return [n.text for n in find_numbers(text, words=words)]


# -- find_numbers on real passages ------------------------------------------------------------


def test_drop_mini_numbers_are_the_ones_a_reader_sees(passages: dict[str, str]) -> None:
    # read off the passages by hand
    assert values(passages["history_319"]) == [
        25, 2014, 2018, 54, 52, 6, 60, 58, 2010, 67, 2010, 1996,
    ]  # fmt: skip
    assert values(passages["history_720"]) == [1611, 1612, 1613, 1614, 27, 1617]
    # "4-8." is a record: two numbers, the hyphen is no minus sign; "38-yard" is 38
    assert values(passages["nfl_653"]) == [13, 38, 25, 2, 38, 31, 28, 4, 8, 2001]


def test_offsets_are_exact_on_drop_passages(passages: dict[str, str]) -> None:
    for pid, text in passages.items():
        for words in (False, True):
            spans = find_numbers(text, words=words)
            assert [s.start for s in spans] == sorted(s.start for s in spans), pid
            for prev, cur in zip(spans, spans[1:], strict=False):
                assert prev.end <= cur.start, (pid, prev, cur)
            for s in spans:
                assert text[s.start : s.end] == s.text, (pid, s)
                if not s.is_word:
                    assert s.value == float(s.text.replace(",", "")), (pid, s)


def test_every_standalone_number_of_a_drop_passage_is_found(passages: dict[str, str]) -> None:
    # independent of the module's regex: whitespace words that are a number once surrounding
    # brackets/punctuation/currency are stripped must be covered by a span
    for pid, text in passages.items():
        covered = {i for s in find_numbers(text) for i in range(s.start, s.end)}
        for m in re.finditer(r"\S+", text):
            core = re.fullmatch(r"[($]*([0-9][0-9,]*(?:\.[0-9]+)?)[%).,;:]*", m.group())
            if core:
                start = m.start() + core.start(1)
                assert set(range(start, start + len(core.group(1).rstrip(",")))) <= covered, (
                    pid,
                    m.group(),
                )


def test_percentages_in_a_drop_passage(passages: dict[str, str]) -> None:
    spans = find_numbers(passages["history_2184"])
    percent = [s.value for s in spans if s.is_percent]
    assert percent[:4] == [86.77, 9.27, 0.23, 1.52]
    assert [s.value for s in spans if s.text == "218,590"] == [218590]


# -- find_numbers on hand-made cases ----------------------------------------------------------


def test_number_span_fields() -> None:
    text = "They won 14,506 votes."
    assert find_numbers(text) == [NumberSpan(9, 15, 14506.0, "14,506")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14,506 fans", [14506]),
        ("1,234,567.25 dollars", [1234567.25]),
        ("2,000", [2000]),
        ("1,2,3", [1, 2, 3]),  # a list: groups must have exactly three digits
        ("1,23", [1, 23]),
        ("12,3456", [12, 3456]),
        ("1,234,56", [1, 234, 56]),  # a broken grouping is not one number
        ("scores of 3, 4 and 5", [3, 4, 5]),
        ("in 2014, the port", [2014]),
    ],
)
def test_thousands_separators_versus_lists(text: str, expected: list[float]) -> None:
    assert values(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.5 goals", [3.5]),
        ("in 2014.", [2014]),  # a full stop is not a decimal point
        ("version 1.2.3 ships", []),  # dotted runs are not numbers
        (".5 of it", []),  # a number needs a leading digit
        ("0.06 percent", [0.06]),
    ],
)
def test_decimals(text: str, expected: list[float]) -> None:
    assert values(text) == expected


@pytest.mark.parametrize(
    ("text", "expected", "spans"),
    [
        ("it was -7 degrees", [-7], ["-7"]),
        ("(-3.5)", [-3.5], ["-3.5"]),
        ("\u22124 points", [-4], ["\u22124"]),
        ("won 24-17", [24, 17], ["24", "17"]),  # a score: the hyphen is a dash
        ("pre-1990 rules", [1990], ["1990"]),
        ("a 45-yard field goal", [45], ["45"]),
        ("from 10 - 20", [10, 20], ["10", "20"]),  # a spaced hyphen is no sign
    ],
)
def test_negative_numbers_need_a_sign_not_glued_to_a_word(
    text: str, expected: list[float], spans: list[str]
) -> None:
    assert values(text) == expected
    assert texts(text) == spans


def test_percentages_flag_but_keep_the_written_value() -> None:
    spans = find_numbers("45% of 12 % and 7 percent, 8 per cent; 9 points")
    assert [(s.text, s.value, s.is_percent) for s in spans] == [
        ("45", 45.0, True),
        ("12", 12.0, True),
        ("7", 7.0, True),
        ("8", 8.0, True),
        ("9", 9.0, False),
    ]


def test_digits_glued_to_letters_are_not_numbers() -> None:
    # ordinals, decades, names, units: documented as not numbers
    assert texts("the 3rd quarter of the 1990s, an A380 at 10am, 21st") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("five terminals", [("five", 5)]),
        ("twenty-one points", [("twenty-one", 21)]),
        ("Two Hundred and Five men", [("Two Hundred and Five", 205)]),
        ("three thousand four hundred", [("three thousand four hundred", 3400)]),
        ("nineteen hundred", [("nineteen hundred", 1900)]),
        ("one two", [("one", 1), ("two", 2)]),  # no compound: two numbers
        ("two and three", [("two", 2), ("three", 3)]),
        ("a hundred fans", [("hundred", 100)]),
        ("2.5 million people", [("2.5 million", 2500000)]),
        ("3\xa0million", [("3\xa0million", 3000000)]),
        ("the twenty-first century, the third", []),  # ordinals are not numbers
        ("hundreds of fans", []),
        ("someone alone", []),  # whole words only
    ],
)
def test_number_words(text: str, expected: list[tuple[str, float]]) -> None:
    spans = find_numbers(text, words=True)
    assert [(s.text, s.value) for s in spans] == expected
    assert all(s.is_word for s in spans)
    assert find_numbers(text, words=False) == [s for s in find_numbers(text) if not s.is_word]


def test_number_words_are_off_by_default() -> None:
    assert find_numbers("five terminals and 2 ports") == [NumberSpan(19, 20, 2.0, "2")]


# -- digit tokenization -----------------------------------------------------------------------


def pieces(tokens: DigitTokens, tokenizer) -> list[str]:
    return tokenizer.convert_ids_to_tokens(tokens.input_ids.tolist())


def test_vocabulary_has_single_digits_and_continuation_digits(tokenizer) -> None:
    vocab = tokenizer.get_vocab()
    for d in "0123456789":
        assert d in vocab and "##" + d in vocab


def test_digit_tokens_of_a_sentence(tokenizer) -> None:
    text = "Smith scored 1234 goals, -1,234.5 in all."
    tokens = digit_tokenize(text, tokenizer)
    got = list(zip(pieces(tokens, tokenizer), tokens.number_index.tolist(), strict=True))
    assert got == [
        ("smith", -1), ("scored", -1),
        ("1", 0), ("##2", 0), ("##3", 0), ("##4", 0),
        ("goals", -1), (",", -1),
        ("-", 1), ("1", 1), (",", 1), ("2", 1), ("##3", 1), ("##4", 1), (".", 1), ("5", 1),
        ("in", -1), ("all", -1), (".", -1),
    ]  # fmt: skip
    assert tokens.offsets[2:6].tolist() == [[13, 14], [14, 15], [15, 16], [16, 17]]
    assert tokens.is_number_token.tolist() == [i >= 0 for _, i in got]
    assert [n.text for n in tokens.numbers] == ["1234", "-1,234.5"]


def test_all_digit_pieces_outside_numbers_are_split_but_not_number_tokens(tokenizer) -> None:
    tokens = digit_tokenize("an A380 landed", tokenizer)
    assert pieces(tokens, tokenizer) == ["an", "a", "##3", "##8", "##0", "landed"]
    assert not tokens.is_number_token.any()
    assert tokens.offsets.tolist() == [[0, 2], [3, 4], [4, 5], [5, 6], [6, 7], [8, 14]]


def test_numbers_after_a_symbol_are_split_from_it(tokenizer) -> None:
    # "₤999" is one BERT word; the number is still split, starting a fresh digit run
    tokens = digit_tokenize("cost ₤999", tokenizer)
    assert pieces(tokens, tokenizer) == ["cost", "₤", "9", "##9", "##9"]
    assert tokens.number_index.tolist() == [-1, -1, 0, 0, 0]


def test_empty_text(tokenizer) -> None:
    tokens = digit_tokenize("", tokenizer)
    assert len(tokens) == 0 and tokens.offsets.shape == (0, 2) and tokens.numbers == ()


def fold(text: str) -> str:
    """What an uncased BERT tokenizer does to a span: lowercase, accents stripped."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def genbert_reference(text: str, tokenizer) -> list[tuple[str, int, int]]:
    """GenBERT's recipe on the whole text: WordPiece, then every all-digit piece split into
    one piece per digit (``##`` unless it is the first digit of a word-initial piece)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for piece, (s, e) in zip(
        tokenizer.convert_ids_to_tokens(enc["input_ids"]), enc["offset_mapping"], strict=True
    ):
        digits = piece.removeprefix("##")
        if digits.isdigit():
            for k, d in enumerate(digits):
                prefix = "##" if (k > 0 or piece.startswith("##")) else ""
                out.append((prefix + d, s + k, s + k + 1))
        else:
            out.append((piece, s, e))
    return out


def test_digit_tokens_match_genbert_on_drop_passages(passages: dict[str, str], tokenizer) -> None:
    for pid, text in passages.items():
        tokens = digit_tokenize(text, tokenizer)
        got = [
            (p, s, e)
            for p, (s, e) in zip(pieces(tokens, tokenizer), tokens.offsets.tolist(), strict=True)
        ]
        assert got == genbert_reference(text, tokenizer), pid


def test_digit_token_offsets_are_exact_on_drop_passages(
    passages: dict[str, str], tokenizer
) -> None:
    for pid, text in passages.items():
        tokens = digit_tokenize(text, tokenizer)
        names = pieces(tokens, tokenizer)
        starts, ends = tokens.offsets[:, 0], tokens.offsets[:, 1]
        assert (starts[1:] >= ends[:-1]).all(), pid  # in order, never overlapping
        for name, (s, e) in zip(names, tokens.offsets.tolist(), strict=True):
            if name != tokenizer.unk_token:
                assert fold(text[s:e]) == name.removeprefix("##"), (pid, name, s, e)
            assert not (len(name.removeprefix("##")) > 1 and name.removeprefix("##").isdigit())
        # every non-space char is covered by a token
        covered = {i for s, e in tokens.offsets.tolist() for i in range(s, e)}
        assert {i for i, c in enumerate(text) if not c.isspace()} <= covered, pid
        # each number's tokens cover it char by char and re-join to its text
        for k, number in enumerate(tokens.numbers):
            mine = [t for t in range(len(tokens)) if tokens.number_index[t] == k]
            assert "".join(names[t].removeprefix("##") for t in mine) == number.text
            assert tokens.offsets[mine].tolist() == [
                [c, c + 1] for c in range(number.start, number.end)
            ]
            for t in mine:  # '##' exactly on a digit that follows a digit
                prev = text[tokens.offsets[t, 0] - 1] if t != mine[0] else ""
                assert names[t].startswith("##") == (prev.isdigit() and names[t][-1].isdigit())


# -- LSDF -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (127, ["7", "2", "1"]),
        ("127", ["7", "2", "1"]),
        (0, ["0"]),
        (1200, ["0", "0", "2", "1"]),
        (-127, ["-", "7", "2", "1"]),  # the sign stays first
        (12.5, ["5", ".", "2", "1"]),  # tenths, then units, then tens
        ("0.06", ["6", "0", ".", "0"]),
        (12.0, ["2", "1"]),  # an integral float is written as an integer
        (1e-7, ["1", "0", "0", "0", "0", "0", "0", ".", "0"]),  # never in exponent form
    ],
)
def test_lsdf_examples(value: int | float | str, expected: list[str]) -> None:
    assert lsdf(value) == expected


def test_lsdf_wordpieces_mark_digit_runs() -> None:
    assert lsdf(127, wordpiece=True) == ["7", "##2", "##1"]
    assert lsdf(-12.5, wordpiece=True) == ["-", "5", ".", "2", "##1"]
    assert from_lsdf(["-", "5", ".", "2", "##1"]) == "-12.5"


@pytest.mark.parametrize("bad", ["1,234", "1e5", "12.", "+3", "", "abc"])
def test_lsdf_rejects_text_that_is_not_a_plain_number(bad: str) -> None:
    with pytest.raises(ValueError, match="plain number"):
        lsdf(bad)


def test_lsdf_rejects_non_finite_floats() -> None:
    with pytest.raises(ValueError, match="finite"):
        lsdf(float("nan"))
    with pytest.raises(ValueError, match="finite"):
        lsdf(float("-inf"))


@pytest.mark.parametrize("bad", [[], ["-"], [".", "1"], ["1", "-"], ["x"], ["1", ".", ".", "2"]])
def test_from_lsdf_rejects_sequences_that_are_not_numbers(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="do not spell a number"):
        from_lsdf(bad)


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_lsdf_round_trip_integers(n: int) -> None:
    tokens = lsdf(n)
    assert from_lsdf(tokens) == str(n)
    assert int(from_lsdf(lsdf(n, wordpiece=True))) == n
    assert tokens[-1] == str(abs(n))[0]  # the most significant digit comes last


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**9),
                   max_value=10**9))  # fmt: skip
def test_lsdf_round_trip_decimal_text(d: Decimal) -> None:
    text = format(d, "f")  # e.g. "-1234.5600": trailing zeros and "-0" survive too
    assert from_lsdf(lsdf(text)) == text
    assert from_lsdf(lsdf(text, wordpiece=True)) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_lsdf_round_trip_floats_exactly(x: float) -> None:
    assert float(from_lsdf(lsdf(x))) == x
    assert number_text(x) == from_lsdf(lsdf(x))
