"""The pieces both kinds of synthetic question are made of: the operations, word lists, the
generation config, the example record, and drawing numbers and dates (see the package's
docstring for what is generated and how answers are written)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from structqa.data.drop import DropAnswer

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
# TD asks every ND operation but the two that need no context (a date pair, a total's share)
TEXTUAL_OPS = tuple(op for op in NUMERIC_OPS if op not in ("date_compare", "percent"))
STREAM = {"numeric": 0, "textual": 1}
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
K_WORDS = {2: "two", 3: "three"}
CENT = Decimal("0.01")


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


@dataclass(frozen=True)
class Num:
    value: Decimal
    text: str  # as written in the passage


def canonical_number(value: Decimal | int) -> str:
    """A number answer as written in the files: rounded to 2 places (half up), no separators,
    trailing zeros dropped, an integer without ".0": ``Decimal("12.50")`` -> ``"12.5"``."""
    q = Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)
    if q == q.to_integral_value():
        return str(int(q))
    return format(q.normalize(), "f")


def full_years(start: date, end: date) -> int:
    """Complete years from ``start`` to ``end`` (``end >= start``), as an age is counted."""
    return end.year - start.year - ((end.month, end.day) < (start.month, start.day))


def draw_number(
    rng: np.random.Generator,
    cfg: SynthConfig,
    lo: int,
    hi: int,
    decimal: bool | None = None,
) -> Num:
    if decimal is None:
        decimal = bool(rng.random() < cfg.decimal_prob)
    places = 1 + int(rng.integers(cfg.max_decimal_places)) if decimal else 0
    scale = 10**places
    value = Decimal(int(rng.integers(lo * scale, hi * scale + 1))).scaleb(-places)
    separators = value >= 1000 and bool(rng.random() < cfg.separator_prob)
    return Num(value, format(value, f"{',' if separators else ''}.{places}f"))


def distinct_numbers(make: Callable[[], Num], k: int) -> list[Num]:
    """``k`` numbers with distinct values (so every max, min and comparison is unique)."""
    out: dict[Decimal, Num] = {}
    for _ in range(100 * k):
        num = make()
        out.setdefault(num.value, num)
        if len(out) == k:
            return list(out.values())
    raise ValueError(f"cannot draw {k} distinct numbers from this range")


def threshold_for(rng: np.random.Generator, nums: Sequence[Num]) -> int:
    """An integer between the smallest and largest value, equal to none of them."""
    lo, hi = int(min(n.value for n in nums)), int(max(n.value for n in nums))
    values = {n.value for n in nums}
    for _ in range(100):
        t = int(rng.integers(lo, hi + 1))
        if Decimal(t) not in values:
            return t
    return hi + 1


def draw_date(rng: np.random.Generator, cfg: SynthConfig) -> date:
    first = date(cfg.year_range[0], 1, 1).toordinal()
    last = date(cfg.year_range[1], 12, 31).toordinal()
    return date.fromordinal(int(rng.integers(first, last + 1)))


def date_text(d: date, american: bool) -> str:
    month = MONTHS[d.month - 1]
    return f"{month} {d.day}, {d.year}" if american else f"{d.day} {month} {d.year}"


def choose(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def listing(texts: Sequence[str]) -> str:
    return ", ".join(texts[:-1]) + " and " + texts[-1]


def number_answer(value: Decimal | int) -> DropAnswer:
    return DropAnswer(number=canonical_number(value))


def spans_answer(*texts: str) -> DropAnswer:
    return DropAnswer(spans=tuple(texts))


Generated = tuple[str, str, DropAnswer]  # passage, question, answer
Op = Callable[[np.random.Generator, SynthConfig], Generated]
