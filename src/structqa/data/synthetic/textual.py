"""Textual data (TD): 3-5 sentence templated passages (an intro sentence, then one fact per
sentence) about teams, countries, people, cities and events, with questions over them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np

from structqa.data.synthetic.base import (
    CITIES,
    COUNTRIES,
    EVENTS,
    K_WORDS,
    PEOPLE,
    TEAMS,
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
    number_answer,
    spans_answer,
    threshold_for,
)


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
    nums: list[Num]
    passage: str


def _world(rng: np.random.Generator, cfg: SynthConfig, k_min: int) -> _World:
    domain = _DOMAINS[int(rng.integers(len(_DOMAINS)))]
    k = int(rng.integers(k_min, 5))
    names = [domain.names[i] for i in rng.permutation(len(domain.names))[:k]]
    lo, hi = domain.value_range
    nums = distinct_numbers(lambda: draw_number(rng, cfg, lo, hi, decimal=domain.decimal), k)
    facts = [
        domain.fact.format(E=domain.mention(name, start=True), v=num.text)
        for name, num in zip(names, nums, strict=True)
    ]
    return _World(domain, names, nums, " ".join([choose(rng, domain.intros), *facts]))


def _halves(rng: np.random.Generator, cfg: SynthConfig, op: str) -> Generated:
    """The Bears scored 24 points in the first half and 17 in the second."""
    home, away = (TEAMS[i] for i in rng.permutation(len(TEAMS))[:2])
    sentences = [f"The {home} played the {away}."]
    scores: dict[str, list[Num]] = {}
    for team in (home, away):
        first, second = distinct_numbers(lambda: draw_number(rng, cfg, 0, 35, decimal=False), 2)
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
        return passage, question, number_answer(first.value + second.value)
    order = ("first", "second") if first.value > second.value else ("second", "first")
    question = (
        f"How many more points did the {team} score in the {order[0]} half than in the {order[1]}?"
    )
    return passage, question, number_answer(abs(first.value - second.value))


def _td_two(op: str) -> Op:
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
            return w.passage, w.domain.total.format(a=a, b=b), number_answer(x + y)
        if op == "subtract":
            return w.passage, w.domain.diff.format(a=a, b=b), number_answer(x - y)
        larger = bool(rng.random() < 0.5)
        question = w.domain.compare[0 if larger else 1].format(a=a, b=b)
        winner = w.names[i] if (x > y) == larger else w.names[j]
        return w.passage, question, spans_answer(winner)

    return make


def _td_list(op: str) -> Op:
    def make(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
        w = _world(rng, cfg, 3)
        values = [n.value for n in w.nums]
        larger = op in ("max", "argmax") or (op in ("count", "sort") and bool(rng.random() < 0.5))
        side = 0 if larger else 1
        ranked = sorted(range(len(values)), key=lambda i: values[i], reverse=larger)
        if op in ("argmax", "argmin"):
            return w.passage, w.domain.arg[side], spans_answer(w.names[ranked[0]])
        if op in ("max", "min"):
            return w.passage, w.domain.extreme[side], number_answer(values[ranked[0]])
        if op == "count":
            t = threshold_for(rng, w.nums)
            count = sum((v > t) if larger else (v < t) for v in values)
            return w.passage, w.domain.count[side].format(t=t), number_answer(count)
        k = int(rng.integers(2, len(values)))
        question = w.domain.sort[side].format(k=K_WORDS[k])
        return w.passage, question, spans_answer(*(w.names[i] for i in ranked[:k]))

    return make


def _td_date_diff(rng: np.random.Generator, cfg: SynthConfig) -> Generated:
    people = bool(rng.random() < 0.5)
    names = PEOPLE if people else EVENTS
    chosen = [names[i] for i in rng.permutation(len(names))[:2]]
    american = bool(rng.random() < 0.5)
    sentences = ["These records come from the town archive."]
    spans: list[tuple[date, date]] = []
    for name in chosen:
        d1 = draw_date(rng, cfg)
        days = int(rng.integers(20 * 365, 95 * 365) if people else rng.integers(1, 1500))
        d2 = d1 + timedelta(days=days)
        spans.append((d1, d2))
        t1, t2 = date_text(d1, american), date_text(d2, american)
        if people:
            sentences.append(f"{name} was born on {t1} and died on {t2}.")
        else:
            sentences.append(f"The {name} began on {t1} and ended on {t2}.")
    target = int(rng.integers(2))
    d1, d2 = spans[target]
    passage = " ".join(sentences)
    if people:
        question = f"How many years did {chosen[target]} live?"
        return passage, question, number_answer(full_years(d1, d2))
    question = f"How many days did the {chosen[target]} last?"
    return passage, question, number_answer((d2 - d1).days)


TEXTUAL: dict[str, Op] = {
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
