"""Synthetic numerical-reasoning questions in DROP format, in the spirit of GenBERT's data.

GenBERT (Geva et al., 2020), the model NC-BERT builds on, is pre-trained on two synthetic sets
before DROP: *numerical data* (ND), short expressions and lists of numbers with the operation
to apply, and *textual data* (TD), short templated passages with numbers in context and
questions over them. This module writes both, seeded, as DROP JSON that
:func:`structqa.data.drop.read_drop` reads with no skips or warnings.

- ``numeric`` (ND): the passage holds only the numbers (an expression, a list, labelled
  values, two dates, a total), the question names the operation. Operations:
  :data:`NUMERIC_OPS`.
- ``textual`` (TD): 3-5 sentence passages (an intro sentence, then one fact per sentence)
  about teams, countries, people, cities and events, with questions needing the same
  operations. Operations: :data:`TEXTUAL_OPS`.

Answers, all computed exactly (``Decimal`` for numbers, ``datetime.date`` for dates):

- a number answer is written canonically by :func:`canonical_number`: rounded to 2 decimal
  places (half up), no thousands separators, no trailing zeros, no ".0" for an integer
  ("1204", "12.5", "0.75"). With the built-in operations no rounding ever happens: inputs
  have at most 2 decimals and only add, subtract, count and integer percent of an integer
  are computed. No answer is negative (subtraction orders its operands): the DROP metric
  splits tokens on hyphens, so it cannot see a minus sign;
- a span answer is text that occurs verbatim in the passage (a name, a label, a number as
  written there, e.g. "14,506");
- ``sort`` answers several spans, in the asked order (the k largest, largest first). The
  DROP metric compares spans as a bag, so the order is kept in the file for training but not
  scored; asking for k of n (k < n) keeps the bag itself informative;
- ``date_compare`` (ND) answers a DROP date (day, month name, year);
- ``date_diff`` counts days as ``(d2 - d1).days`` and years as complete years (the last
  anniversary of d1 on or before d2; a 29 February start has its anniversary on 1 March in
  common years).

Every example is checked as it is made (:func:`verify`); ``tests/data/test_synthetic.py``
recomputes every answer from the text alone.

Ids: query ``synth-{kind}-{seed}-{i}``, passage ``synth-{kind}-{seed}-p{i}``; each question has
its own passage. The same (kind, n, seed, config) gives byte-identical files; numeric and
textual draw from separate streams (``default_rng([seed, stream])``), so the numeric part of
``both`` equals ``numeric`` alone.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np

from structqa.data.drop import DropAnswer
from structqa.io import write_json

__all__ = [
    "CITIES",
    "COUNTRIES",
    "EVENTS",
    "KINDS",
    "MONTHS",
    "NUMERIC_OPS",
    "PEOPLE",
    "TEAMS",
    "TEXTUAL_OPS",
    "VARIABLES",
    "SynthConfig",
    "SynthExample",
    "canonical_number",
    "full_years",
    "generate",
    "generate_numeric",
    "generate_textual",
    "summarize",
    "to_drop_json",
    "verify",
    "write_synthetic",
]

KINDS = ("numeric", "textual")
NUMERIC_OPS = (
    "add",
    "subtract",
    "compare",
    "max",
    "min",
    "count",
    "sort",
    "argmax",
    "argmin",
    "date_diff",
    "date_compare",
    "percent",
)
TEXTUAL_OPS = (
    "add",
    "subtract",
    "compare",
    "max",
    "min",
    "count",
    "sort",
    "argmax",
    "argmin",
    "date_diff",
)
_STREAM = {"numeric": 0, "textual": 1}

MONTHS = (
    "January February March April May June July August September October November December"
).split()
# Names never contain one another, so a name found in a sentence is that entity.
TEAMS = (
    "Bears Lions Packers Vikings Eagles Giants Cowboys Saints Falcons Ravens Steelers Browns"
).split()
COUNTRIES = (
    "Portugal",
    "Norway",
    "Kenya",
    "Chile",
    "Vietnam",
    "Poland",
    "Morocco",
    "Canada",
    "Egypt",
    "Peru",
    "Sweden",
    "Japan",
)
PEOPLE = (
    "Maria Lopez",
    "James Okafor",
    "Anna Berg",
    "Tom Reyes",
    "Lena Novak",
    "Omar Haddad",
    "Grace Kim",
    "Ivan Petrov",
    "Sara Cohen",
    "Paul Dubois",
)
CITIES = (
    "Lisbon",
    "Oslo",
    "Dublin",
    "Quito",
    "Perth",
    "Osaka",
    "Cairo",
    "Lima",
    "Seattle",
    "Mumbai",
)
EVENTS = (
    "harbor strike",
    "rail strike",
    "spring festival",
    "bridge repair",
    "flood relief effort",
    "trade fair",
    "peace conference",
    "census survey",
)
VARIABLES = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
_K_WORDS = {2: "two", 3: "three"}
_CENT = Decimal("0.01")


@dataclass(frozen=True)
class SynthConfig:
    """What to generate. Ranges are inclusive; op weights need not sum to 1 (0 disables).

    ``int_range`` bounds ND numbers (integers, and decimals with 1..``max_decimal_places``
    places drawn with ``decimal_prob``); numbers of 1,000 and more get thousands separators
    with ``separator_prob`` (ND and TD). TD domains keep their own natural value ranges
    (points 0-60, ages 18-95, ...).
    """

    int_range: tuple[int, int] = (0, 20_000)
    decimal_prob: float = 0.25
    max_decimal_places: int = 2
    separator_prob: float = 0.3
    list_size: tuple[int, int] = (3, 6)
    year_range: tuple[int, int] = (1900, 2030)
    numeric_ops: Mapping[str, float] = field(
        default_factory=lambda: dict.fromkeys(NUMERIC_OPS, 1.0)
    )
    textual_ops: Mapping[str, float] = field(
        default_factory=lambda: dict.fromkeys(TEXTUAL_OPS, 1.0)
    )

    def __post_init__(self) -> None:
        lo, hi = self.int_range
        if not 0 <= lo < hi:
            raise ValueError(f"int_range must be 0 <= low < high, got {self.int_range}")
        if not 1 <= self.year_range[0] <= self.year_range[1] <= 9000:
            raise ValueError(f"year_range must be within 1..9000, got {self.year_range}")
        if not 3 <= self.list_size[0] <= self.list_size[1] <= len(VARIABLES):
            raise ValueError(f"list_size must be within 3..{len(VARIABLES)}, got {self.list_size}")
        if not 1 <= self.max_decimal_places <= 2:
            raise ValueError("max_decimal_places must be 1 or 2 (answers keep 2 places)")
        for name in ("decimal_prob", "separator_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        for kind, weights, known in (
            ("numeric_ops", self.numeric_ops, NUMERIC_OPS),
            ("textual_ops", self.textual_ops, TEXTUAL_OPS),
        ):
            for op, weight in weights.items():
                if op not in known:
                    close = difflib.get_close_matches(op, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"{kind}: unknown operation {op!r}{hint}")
                if weight < 0:
                    raise ValueError(f"{kind}: negative weight for {op!r}")
            if sum(weights.values()) <= 0:
                raise ValueError(f"{kind}: no operation has a positive weight")


@dataclass(frozen=True)
class SynthExample:
    """One generated question over its own passage; ``op`` is the operation it needs."""

    id: str
    passage_id: str
    kind: str
    op: str
    passage: str
    question: str
    answer: DropAnswer


# -- numbers and dates ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Num:
    value: Decimal
    text: str  # as written in the passage


def canonical_number(value: Decimal | int) -> str:
    """A number answer as written in the files: rounded to 2 places (half up), no separators,
    trailing zeros dropped, an integer without ".0": ``Decimal("12.50")`` -> ``"12.5"``."""
    q = Decimal(value).quantize(_CENT, rounding=ROUND_HALF_UP)
    if q == q.to_integral_value():
        return str(int(q))
    return format(q.normalize(), "f")


def full_years(start: date, end: date) -> int:
    """Complete years from ``start`` to ``end`` (``end >= start``), as an age is counted."""
    return end.year - start.year - ((end.month, end.day) < (start.month, start.day))


def _number(
    rng: np.random.Generator,
    cfg: SynthConfig,
    lo: int,
    hi: int,
    decimal: bool | None = None,
) -> _Num:
    if decimal is None:
        decimal = bool(rng.random() < cfg.decimal_prob)
    places = 1 + int(rng.integers(cfg.max_decimal_places)) if decimal else 0
    scale = 10**places
    value = Decimal(int(rng.integers(lo * scale, hi * scale + 1))).scaleb(-places)
    separators = value >= 1000 and bool(rng.random() < cfg.separator_prob)
    return _Num(value, format(value, f"{',' if separators else ''}.{places}f"))


def _distinct(make: Callable[[], _Num], k: int) -> list[_Num]:
    """``k`` numbers with distinct values (so every max, min and comparison is unique)."""
    out: dict[Decimal, _Num] = {}
    for _ in range(100 * k):
        num = make()
        out.setdefault(num.value, num)
        if len(out) == k:
            return list(out.values())
    raise ValueError(f"cannot draw {k} distinct numbers from this range")


def _threshold(rng: np.random.Generator, nums: Sequence[_Num]) -> int:
    """An integer between the smallest and largest value, equal to none of them."""
    lo, hi = int(min(n.value for n in nums)), int(max(n.value for n in nums))
    values = {n.value for n in nums}
    for _ in range(100):
        t = int(rng.integers(lo, hi + 1))
        if Decimal(t) not in values:
            return t
    return hi + 1


def _date(rng: np.random.Generator, cfg: SynthConfig) -> date:
    first = date(cfg.year_range[0], 1, 1).toordinal()
    last = date(cfg.year_range[1], 12, 31).toordinal()
    return date.fromordinal(int(rng.integers(first, last + 1)))


def _date_text(d: date, american: bool) -> str:
    month = MONTHS[d.month - 1]
    return f"{month} {d.day}, {d.year}" if american else f"{d.day} {month} {d.year}"


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _listing(texts: Sequence[str]) -> str:
    return ", ".join(texts[:-1]) + " and " + texts[-1]


def _number_answer(value: Decimal | int) -> DropAnswer:
    return DropAnswer(number=canonical_number(value))


def _spans(*texts: str) -> DropAnswer:
    return DropAnswer(spans=tuple(texts))


Generated = tuple[str, str, DropAnswer]  # passage, question, answer
_Op = Callable[[np.random.Generator, SynthConfig], Generated]


# -- numeric data (ND) ----------------------------------------------------------------------


def _nd_numbers(rng: np.random.Generator, cfg: SynthConfig, k: int) -> list[_Num]:
    return _distinct(lambda: _number(rng, cfg, *cfg.int_range), k)


def _nd_list_size(rng: np.random.Generator, cfg: SynthConfig) -> int:
    return int(rng.integers(cfg.list_size[0], cfg.list_size[1] + 1))


_EXPRESSION_QUESTIONS = ("What is the result?", "What is the value of the expression?")


def _nd_add(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, int(rng.integers(2, 5)))
    question = _pick(rng, ("What is the sum?", *_EXPRESSION_QUESTIONS))
    return " + ".join(n.text for n in nums), question, _number_answer(sum(n.value for n in nums))


def _nd_subtract(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    a, b, c = sorted(_nd_numbers(rng, cfg, 3), key=lambda n: n.value, reverse=True)
    # a > b > c: every pattern is non-negative.
    pattern = int(rng.integers(3))
    if pattern == 0:
        expr, value = f"{a.text} - {c.text}", a.value - c.value
    elif pattern == 1:
        expr, value = f"{a.text} - {b.text} + {c.text}", a.value - b.value + c.value
    else:
        expr, value = f"{c.text} + {a.text} - {b.text}", c.value + a.value - b.value
    questions = _EXPRESSION_QUESTIONS if pattern else ("What is the difference?",)
    return expr, _pick(rng, questions), _number_answer(value)


def _nd_compare(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    x, y = _nd_numbers(rng, cfg, 2)
    larger = bool(rng.random() < 0.5)
    pick = max if larger else min
    question = f"Which number is {'larger' if larger else 'smaller'}?"
    winner = pick((x, y), key=lambda n: n.value)
    return f"The numbers are {x.text} and {y.text}.", question, _spans(winner.text)


def _nd_extreme(op: str) -> _Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
        word = "largest" if op == "max" else "smallest"
        value = (max if op == "max" else min)(n.value for n in nums)
        passage = f"The numbers are {_listing([n.text for n in nums])}."
        return passage, f"What is the {word} number?", _number_answer(value)

    return make


def _nd_count(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
    t = _threshold(rng, nums)
    greater = bool(rng.random() < 0.5)
    count = sum((n.value > t) if greater else (n.value < t) for n in nums)
    question = f"How many of the numbers are {'greater' if greater else 'less'} than {t}?"
    return f"The numbers are {_listing([n.text for n in nums])}.", question, _number_answer(count)


def _nd_sort(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
    k = int(rng.integers(2, len(nums)))
    largest = bool(rng.random() < 0.5)
    ranked = sorted(nums, key=lambda n: n.value, reverse=largest)[:k]
    order = "largest first" if largest else "smallest first"
    question = f"What are the {k} {'largest' if largest else 'smallest'} numbers, {order}?"
    passage = f"The numbers are {_listing([n.text for n in nums])}."
    return passage, question, _spans(*(n.text for n in ranked))


def _nd_arg(op: str) -> _Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
        labels = [VARIABLES[i] for i in rng.permutation(len(VARIABLES))[: len(nums)]]
        pick = max if op == "argmax" else min
        best = pick(range(len(nums)), key=lambda i: nums[i].value)
        passage = _listing([f"{lab} = {n.text}" for lab, n in zip(labels, nums, strict=True)])
        word = "largest" if op == "argmax" else "smallest"
        return f"{passage}.", f"Which variable has the {word} value?", _spans(labels[best])

    return make


def _nd_date_diff(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    d1 = _date(rng, cfg)
    years = bool(rng.random() < 0.5)
    d2 = d1 + timedelta(days=int(rng.integers(366, 40 * 365) if years else rng.integers(1, 3000)))
    american = bool(rng.random() < 0.5)
    passage = (
        f"The first date is {_date_text(d1, american)} and the second date is "
        f"{_date_text(d2, american)}."
    )
    if years:
        question = "How many full years passed between the two dates?"
        return passage, question, _number_answer(full_years(d1, d2))
    return passage, "How many days passed between the two dates?", _number_answer((d2 - d1).days)


def _nd_date_compare(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    d1, d2 = _date(rng, cfg), _date(rng, cfg)
    while d2 == d1:
        d2 = _date(rng, cfg)
    earlier = bool(rng.random() < 0.5)
    best = min(d1, d2) if earlier else max(d1, d2)
    american = bool(rng.random() < 0.5)
    passage = f"The dates are {_date_text(d1, american)} and {_date_text(d2, american)}."
    question = f"Which date is {'earlier' if earlier else 'later'}?"
    answer = DropAnswer(date=(str(best.day), MONTHS[best.month - 1], str(best.year)))
    return passage, question, answer


def _nd_percent(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    base = _number(rng, cfg, *cfg.int_range, decimal=False)
    p = int(rng.integers(1, 100))
    return (
        f"The total is {base.text}.",
        f"What is {p}% of the total?",
        _number_answer(base.value * p / 100),
    )


_NUMERIC: dict[str, _Op] = {
    "add": _nd_add,
    "subtract": _nd_subtract,
    "compare": _nd_compare,
    "max": _nd_extreme("max"),
    "min": _nd_extreme("min"),
    "count": _nd_count,
    "sort": _nd_sort,
    "argmax": _nd_arg("argmax"),
    "argmin": _nd_arg("argmin"),
    "date_diff": _nd_date_diff,
    "date_compare": _nd_date_compare,
    "percent": _nd_percent,
}


# -- textual data (TD) ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Domain:
    """Entities with one measured quantity, and how to write about it. Templates take
    ``{E}`` (the entity starting a sentence), ``{a}``/``{b}`` (entities inside a question),
    ``{v}`` (a value), ``{t}`` (a threshold) and ``{k}`` (a count word); each pair is
    (larger, smaller)."""

    noun: str
    names: tuple[str, ...]
    article: str
    value_range: tuple[int, int]
    decimal: bool
    intros: tuple[str, ...]
    fact: str
    total: str
    diff: str
    compare: tuple[str, str]
    arg: tuple[str, str]
    extreme: tuple[str, str]
    count: tuple[str, str]
    sort: tuple[str, str]

    def mention(self, name: str, start: bool = False) -> str:
        article = self.article.capitalize() if start else self.article
        return f"{article}{name}"


_DOMAINS = (
    _Domain(
        noun="team",
        names=tuple(TEAMS),
        article="the ",
        value_range=(0, 60),
        decimal=False,
        intros=("The regular season ended last week.", "Here are the league results."),
        fact="{E} scored {v} points.",
        total="How many points did {a} and {b} score in total?",
        diff="How many more points did {a} score than {b}?",
        compare=(
            "Which team scored more points, {a} or {b}?",
            "Which team scored fewer points, {a} or {b}?",
        ),
        arg=("Which team scored the most points?", "Which team scored the fewest points?"),
        extreme=(
            "How many points did the team with the most points score?",
            "How many points did the team with the fewest points score?",
        ),
        count=(
            "How many teams scored more than {t} points?",
            "How many teams scored fewer than {t} points?",
        ),
        sort=(
            "Which {k} teams scored the most points, in order?",
            "Which {k} teams scored the fewest points, in order?",
        ),
    ),
    _Domain(
        noun="country",
        names=COUNTRIES,
        article="",
        value_range=(100_000, 99_000_000),
        decimal=False,
        intros=("The figures come from the last census.", "A report compared several countries."),
        fact="{E} had a population of {v}.",
        total="What was the combined population of {a} and {b}?",
        diff="How many more people lived in {a} than in {b}?",
        compare=(
            "Which country had a larger population, {a} or {b}?",
            "Which country had a smaller population, {a} or {b}?",
        ),
        arg=(
            "Which country had the largest population?",
            "Which country had the smallest population?",
        ),
        extreme=(
            "What was the largest population among these countries?",
            "What was the smallest population among these countries?",
        ),
        count=(
            "How many countries had a population larger than {t}?",
            "How many countries had a population smaller than {t}?",
        ),
        sort=(
            "Which {k} countries had the largest populations, in order?",
            "Which {k} countries had the smallest populations, in order?",
        ),
    ),
    _Domain(
        noun="person",
        names=PEOPLE,
        article="",
        value_range=(18, 95),
        decimal=False,
        intros=("Several members joined the club.", "The committee has a few members."),
        fact="{E} is {v} years old.",
        total="What is the combined age of {a} and {b}?",
        diff="How many years older is {a} than {b}?",
        compare=("Who is older, {a} or {b}?", "Who is younger, {a} or {b}?"),
        arg=("Who is the oldest?", "Who is the youngest?"),
        extreme=("How old is the oldest person?", "How old is the youngest person?"),
        count=("How many people are older than {t}?", "How many people are younger than {t}?"),
        sort=(
            "Which {k} people are the oldest, in order?",
            "Which {k} people are the youngest, in order?",
        ),
    ),
    _Domain(
        noun="city",
        names=CITIES,
        article="",
        value_range=(100, 2500),
        decimal=True,
        intros=("Weather stations measured the rain.", "A survey compared rainfall in cities."),
        fact="{E} received {v} mm of rain last year.",
        total="How much rain did {a} and {b} receive in total?",
        diff="How much more rain did {a} receive than {b}?",
        compare=(
            "Which city received more rain, {a} or {b}?",
            "Which city received less rain, {a} or {b}?",
        ),
        arg=("Which city received the most rain?", "Which city received the least rain?"),
        extreme=(
            "How much rain fell in the city with the most rain?",
            "How much rain fell in the city with the least rain?",
        ),
        count=(
            "How many cities received more than {t} mm of rain?",
            "How many cities received less than {t} mm of rain?",
        ),
        sort=(
            "Which {k} cities received the most rain, in order?",
            "Which {k} cities received the least rain, in order?",
        ),
    ),
)


@dataclass(frozen=True)
class _World:
    domain: _Domain
    names: list[str]
    nums: list[_Num]
    passage: str


def _world(rng: np.random.Generator, cfg: SynthConfig, k_min: int) -> _World:
    domain = _DOMAINS[int(rng.integers(len(_DOMAINS)))]
    k = int(rng.integers(k_min, 5))
    names = [domain.names[i] for i in rng.permutation(len(domain.names))[:k]]
    lo, hi = domain.value_range
    nums = _distinct(lambda: _number(rng, cfg, lo, hi, decimal=domain.decimal), k)
    facts = [
        domain.fact.format(E=domain.mention(name, start=True), v=num.text)
        for name, num in zip(names, nums, strict=True)
    ]
    return _World(domain, names, nums, " ".join([_pick(rng, domain.intros), *facts]))


def _halves(rng: np.random.Generator, cfg: SynthConfig, op: str) -> Generated:
    """The Bears scored 24 points in the first half and 17 in the second."""
    home, away = (TEAMS[i] for i in rng.permutation(len(TEAMS))[:2])
    sentences = [f"The {home} played the {away}."]
    scores: dict[str, list[_Num]] = {}
    for team in (home, away):
        first, second = _distinct(lambda: _number(rng, cfg, 0, 35, decimal=False), 2)
        scores[team] = [first, second]
        sentences.append(
            f"The {team} scored {first.text} points in the first half and {second.text} in "
            "the second."
        )
    team = (home, away)[int(rng.integers(2))]
    first, second = scores[team]
    passage = " ".join(sentences)
    if op == "add":
        question = f"How many points did the {team} score in total?"
        return passage, question, _number_answer(first.value + second.value)
    order = ("first", "second") if first.value > second.value else ("second", "first")
    question = (
        f"How many more points did the {team} score in the {order[0]} half than in the {order[1]}?"
    )
    return passage, question, _number_answer(abs(first.value - second.value))


def _td_two(op: str) -> _Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        if op in ("add", "subtract") and rng.random() < 0.25:
            return _halves(rng, cfg, op)
        w = _world(rng, cfg, 2)
        i, j = (int(x) for x in rng.permutation(len(w.names))[:2])
        if op == "subtract" and w.nums[i].value < w.nums[j].value:
            i, j = j, i
        a, b = w.domain.mention(w.names[i]), w.domain.mention(w.names[j])
        x, y = w.nums[i].value, w.nums[j].value
        if op == "add":
            return w.passage, w.domain.total.format(a=a, b=b), _number_answer(x + y)
        if op == "subtract":
            return w.passage, w.domain.diff.format(a=a, b=b), _number_answer(x - y)
        larger = bool(rng.random() < 0.5)
        question = w.domain.compare[0 if larger else 1].format(a=a, b=b)
        winner = w.names[i] if (x > y) == larger else w.names[j]
        return w.passage, question, _spans(winner)

    return make


def _td_list(op: str) -> _Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        w = _world(rng, cfg, 3)
        values = [n.value for n in w.nums]
        larger = op in ("max", "argmax") or (op in ("count", "sort") and bool(rng.random() < 0.5))
        side = 0 if larger else 1
        ranked = sorted(range(len(values)), key=lambda i: values[i], reverse=larger)
        if op in ("argmax", "argmin"):
            return w.passage, w.domain.arg[side], _spans(w.names[ranked[0]])
        if op in ("max", "min"):
            return w.passage, w.domain.extreme[side], _number_answer(values[ranked[0]])
        if op == "count":
            t = _threshold(rng, w.nums)
            count = sum((v > t) if larger else (v < t) for v in values)
            return w.passage, w.domain.count[side].format(t=t), _number_answer(count)
        k = int(rng.integers(2, len(values)))
        question = w.domain.sort[side].format(k=_K_WORDS[k])
        return w.passage, question, _spans(*(w.names[i] for i in ranked[:k]))

    return make


def _td_date_diff(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    people = bool(rng.random() < 0.5)
    names = PEOPLE if people else EVENTS
    chosen = [names[i] for i in rng.permutation(len(names))[:2]]
    american = bool(rng.random() < 0.5)
    sentences = ["These records come from the town archive."]
    spans: list[tuple[date, date]] = []
    for name in chosen:
        d1 = _date(rng, cfg)
        days = int(rng.integers(20 * 365, 95 * 365) if people else rng.integers(1, 1500))
        d2 = d1 + timedelta(days=days)
        spans.append((d1, d2))
        t1, t2 = _date_text(d1, american), _date_text(d2, american)
        if people:
            sentences.append(f"{name} was born on {t1} and died on {t2}.")
        else:
            sentences.append(f"The {name} began on {t1} and ended on {t2}.")
    target = int(rng.integers(2))
    d1, d2 = spans[target]
    passage = " ".join(sentences)
    if people:
        question = f"How many years did {chosen[target]} live?"
        return passage, question, _number_answer(full_years(d1, d2))
    question = f"How many days did the {chosen[target]} last?"
    return passage, question, _number_answer((d2 - d1).days)


_TEXTUAL: dict[str, _Op] = {
    "add": _td_two("add"),
    "subtract": _td_two("subtract"),
    "compare": _td_two("compare"),
    "max": _td_list("max"),
    "min": _td_list("min"),
    "count": _td_list("count"),
    "sort": _td_list("sort"),
    "argmax": _td_list("argmax"),
    "argmin": _td_list("argmin"),
    "date_diff": _td_date_diff,
}


# -- generation, checks and output ----------------------------------------------------------

_CANONICAL = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]?[1-9])?")


def verify(example: SynthExample) -> None:
    """Raise ValueError unless the answer is well formed: a canonical number, spans found
    verbatim in the passage, or a real calendar date."""
    answer = example.answer
    if answer.number:
        if not _CANONICAL.fullmatch(answer.number):
            raise ValueError(f"{example.id}: non-canonical number {answer.number!r}")
    elif answer.spans:
        for span in answer.spans:
            if not span or span not in example.passage:
                raise ValueError(f"{example.id}: span {span!r} is not in the passage")
    else:
        day, month, year = answer.date
        date(int(year), MONTHS.index(month) + 1, int(day))  # raises ValueError if invalid


def _generate(kind: str, n: int, seed: int, config: SynthConfig | None) -> list[SynthExample]:
    if n < 0 or seed < 0:
        raise ValueError(f"n and seed must be non-negative, got n={n}, seed={seed}")
    cfg = config or SynthConfig()
    table, weights = (
        (_NUMERIC, cfg.numeric_ops) if kind == "numeric" else (_TEXTUAL, cfg.textual_ops)
    )
    ops = [op for op in table if weights.get(op, 0.0) > 0]
    p = np.array([weights[op] for op in ops], dtype=float)
    rng = np.random.default_rng([seed, _STREAM[kind]])
    out: list[SynthExample] = []
    for i in range(n):
        op = ops[int(rng.choice(len(ops), p=p / p.sum()))]
        passage, question, answer = table[op](rng, cfg)
        example = SynthExample(
            id=f"synth-{kind}-{seed}-{i}",
            passage_id=f"synth-{kind}-{seed}-p{i}",
            kind=kind,
            op=op,
            passage=passage,
            question=question,
            answer=answer,
        )
        verify(example)
        out.append(example)
    return out


def generate_numeric(n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` ND questions (expressions, lists and dates), seeded."""
    return _generate("numeric", n, seed, config)


def generate_textual(n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` TD questions (templated passages with numbers in context), seeded."""
    return _generate("textual", n, seed, config)


def generate(kind: str, n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` questions of ``kind`` ``numeric``, ``textual`` or ``both`` (``n // 2`` numeric,
    then the rest textual)."""
    if kind == "both":
        return generate_numeric(n // 2, seed, config) + generate_textual(n - n // 2, seed, config)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose numeric, textual or both")
    return _generate(kind, n, seed, config)


def _answer_json(answer: DropAnswer) -> dict[str, Any]:
    day, month, year = answer.date
    return {
        "number": answer.number,
        "date": {"day": day, "month": month, "year": year},
        "spans": list(answer.spans),
    }


def to_drop_json(examples: Sequence[SynthExample]) -> dict[str, Any]:
    """DROP JSON (passage id -> passage and its questions); each question also records its
    ``operation`` (readers ignore the extra key)."""
    doc: dict[str, Any] = {}
    for ex in examples:
        if ex.passage_id in doc:
            raise ValueError(f"duplicate passage id {ex.passage_id!r}")
        qa = {
            "question": ex.question,
            "query_id": ex.id,
            "answer": _answer_json(ex.answer),
            "validated_answers": [],
            "operation": ex.op,
        }
        doc[ex.passage_id] = {"passage": ex.passage, "qa_pairs": [qa]}
    return doc


def write_synthetic(path: str | Path, examples: Sequence[SynthExample]) -> None:
    """Write ``examples`` as one DROP JSON file, atomically."""
    write_json(path, to_drop_json(examples))


def summarize(examples: Sequence[SynthExample]) -> dict[tuple[str, str, str], int]:
    """Counts per (kind, operation, answer type), sorted."""
    counts = Counter((ex.kind, ex.op, ex.answer.kind) for ex in examples)
    return dict(sorted(counts.items()))
