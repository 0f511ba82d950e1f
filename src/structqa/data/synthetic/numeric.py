"""Numerical data (ND): the passage holds only the numbers (an expression, a list, labelled
values, two dates, a total) and the question names the operation."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from structqa.data.drop import DropAnswer
from structqa.data.synthetic.base import (
    MONTHS,
    VARIABLES,
    Generated,
    Num,
    Op,
    SynthConfig,
    choose,
    date_text,
    distinct_numbers,
    draw_date,
    draw_number,
    full_years,
    listing,
    number_answer,
    spans_answer,
    threshold_for,
)


def _nd_numbers(rng: np.random.Generator, cfg: SynthConfig, k: int) -> list[Num]:
    return distinct_numbers(lambda: draw_number(rng, cfg, *cfg.int_range), k)


def _nd_list_size(rng: np.random.Generator, cfg: SynthConfig) -> int:
    return int(rng.integers(cfg.list_size[0], cfg.list_size[1] + 1))


_EXPRESSION_QUESTIONS = ("What is the result?", "What is the value of the expression?")


def _nd_add(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, int(rng.integers(2, 5)))
    question = choose(rng, ("What is the sum?", *_EXPRESSION_QUESTIONS))
    return " + ".join(n.text for n in nums), question, number_answer(sum(n.value for n in nums))


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
    return expr, choose(rng, questions), number_answer(value)


def _nd_compare(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    x, y = _nd_numbers(rng, cfg, 2)
    larger = bool(rng.random() < 0.5)
    pick = max if larger else min
    question = f"Which number is {'larger' if larger else 'smaller'}?"
    winner = pick((x, y), key=lambda n: n.value)
    return f"The numbers are {x.text} and {y.text}.", question, spans_answer(winner.text)


def _nd_extreme(op: str) -> Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
        word = "largest" if op == "max" else "smallest"
        value = (max if op == "max" else min)(n.value for n in nums)
        passage = f"The numbers are {listing([n.text for n in nums])}."
        return passage, f"What is the {word} number?", number_answer(value)

    return make


def _nd_count(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
    t = threshold_for(rng, nums)
    greater = bool(rng.random() < 0.5)
    count = sum((n.value > t) if greater else (n.value < t) for n in nums)
    question = f"How many of the numbers are {'greater' if greater else 'less'} than {t}?"
    return f"The numbers are {listing([n.text for n in nums])}.", question, number_answer(count)


def _nd_sort(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
    k = int(rng.integers(2, len(nums)))
    largest = bool(rng.random() < 0.5)
    ranked = sorted(nums, key=lambda n: n.value, reverse=largest)[:k]
    order = "largest first" if largest else "smallest first"
    question = f"What are the {k} {'largest' if largest else 'smallest'} numbers, {order}?"
    passage = f"The numbers are {listing([n.text for n in nums])}."
    return passage, question, spans_answer(*(n.text for n in ranked))


def _nd_arg(op: str) -> Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        nums = _nd_numbers(rng, cfg, _nd_list_size(rng, cfg))
        labels = [VARIABLES[i] for i in rng.permutation(len(VARIABLES))[: len(nums)]]
        pick = max if op == "argmax" else min
        best = pick(range(len(nums)), key=lambda i: nums[i].value)
        passage = listing([f"{lab} = {n.text}" for lab, n in zip(labels, nums, strict=True)])
        word = "largest" if op == "argmax" else "smallest"
        return f"{passage}.", f"Which variable has the {word} value?", spans_answer(labels[best])

    return make


def _nd_date_diff(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    d1 = draw_date(rng, cfg)
    years = bool(rng.random() < 0.5)
    d2 = d1 + timedelta(days=int(rng.integers(366, 40 * 365) if years else rng.integers(1, 3000)))
    american = bool(rng.random() < 0.5)
    passage = (
        f"The first date is {date_text(d1, american)} and the second date is "
        f"{date_text(d2, american)}."
    )
    if years:
        question = "How many full years passed between the two dates?"
        return passage, question, number_answer(full_years(d1, d2))
    return passage, "How many days passed between the two dates?", number_answer((d2 - d1).days)


def _nd_date_compare(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    d1, d2 = draw_date(rng, cfg), draw_date(rng, cfg)
    while d2 == d1:
        d2 = draw_date(rng, cfg)
    earlier = bool(rng.random() < 0.5)
    best = min(d1, d2) if earlier else max(d1, d2)
    american = bool(rng.random() < 0.5)
    passage = f"The dates are {date_text(d1, american)} and {date_text(d2, american)}."
    question = f"Which date is {'earlier' if earlier else 'later'}?"
    answer = DropAnswer(date=(str(best.day), MONTHS[best.month - 1], str(best.year)))
    return passage, question, answer


def _nd_percent(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    base = draw_number(rng, cfg, *cfg.int_range, decimal=False)
    p = int(rng.integers(1, 100))
    return (
        f"The total is {base.text}.",
        f"What is {p}% of the total?",
        number_answer(base.value * p / 100),
    )


NUMERIC: dict[str, Op] = {
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
