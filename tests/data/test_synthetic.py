"""Synthetic ND/TD data: determinism, DROP format, and every answer recomputed from the text."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.drop import read_drop
from structqa.data.synthetic import (
    CITIES,
    COUNTRIES,
    EVENTS,
    MONTHS,
    PEOPLE,
    TEAMS,
    SynthConfig,
    SynthExample,
    canonical_number,
    full_years,
    generate,
    to_drop_json,
    write_synthetic,
)
from structqa.features.numbers import find_numbers
from structqa.metrics.drop import drop_score, gold_from_drop_json

N = 600  # per kind: every operation appears dozens of times
NAMES = (*TEAMS, *COUNTRIES, *PEOPLE, *CITIES, *EVENTS)
MAX_WORDS = {"more", "most", "larger", "largest", "older", "oldest", "greater", "later"}
MIN_WORDS = {"fewer", "fewest", "smaller", "smallest", "younger", "youngest", "less", "least"}
MIN_WORDS |= {"earlier"}
DATE = re.compile(
    rf"(?:(\d{{1,2}}) ({'|'.join(MONTHS)}) (\d{{4}})|({'|'.join(MONTHS)}) (\d{{1,2}}), (\d{{4}}))"
)


@pytest.fixture(scope="module")
def examples() -> list[SynthExample]:
    return generate("both", 2 * N, seed=7)


# --- an independent reading of the text -------------------------------------------------------


def fmt(value: Decimal | int) -> str:
    """Canonical number, written independently of the generator: via float and %-format."""
    text = f"{float(value):.2f}".rstrip("0").rstrip(".")
    return text or "0"


def dec(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def numbers(text: str) -> list[Decimal]:
    return [dec(n.text) for n in find_numbers(text)]


def dates(text: str) -> list[date]:
    out = []
    for m in DATE.finditer(text):
        day, month, year = (m[1], m[2], m[3]) if m[1] else (m[5], m[4], m[6])
        out.append(date(int(year), MONTHS.index(month) + 1, int(day)))
    return out


def years_between(start: date, end: date) -> int:
    """Complete years by stepping anniversaries (29 February -> 1 March in common years)."""
    n = 0
    while True:
        year = start.year + n + 1
        try:
            anniversary = start.replace(year=year)
        except ValueError:
            anniversary = date(year, 3, 1)
        if anniversary > end:
            return n
        n += 1


def direction(question: str) -> bool:
    """True for the larger/later side of a question, False for the smaller/earlier one."""
    words = set(re.findall(r"[a-z]+", question.lower()))
    up, down = bool(words & MAX_WORDS), bool(words & MIN_WORDS)
    assert up != down, question
    return up


def ordered(items: list, key, largest: bool) -> list:
    return sorted(items, key=key, reverse=largest)


def expected_numeric(ex: SynthExample) -> str | tuple[str, ...]:
    p, q, op = ex.passage, ex.question, ex.op
    if op in ("add", "subtract"):
        tokens = p.split()
        total = dec(tokens[0])
        for sign, term in zip(tokens[1::2], tokens[2::2], strict=True):
            total += dec(term) if sign == "+" else -dec(term)
        return fmt(total)
    if op in ("date_diff", "date_compare"):
        d1, d2 = dates(p)
        if op == "date_compare":
            best = max(d1, d2) if direction(q) else min(d1, d2)
            return f"{best.day} {MONTHS[best.month - 1]} {best.year}"
        return fmt(years_between(d1, d2) if "years" in q else (d2 - d1).days)
    if op == "percent":
        (rate,) = [n for n in find_numbers(q) if n.is_percent]
        return fmt(numbers(p)[0] * Decimal(rate.text) / 100)
    if op in ("argmax", "argmin"):
        pairs = re.findall(r"(\w+) = ([\d,.]*\d)", p)
        return (max if op == "argmax" else min)(pairs, key=lambda kv: dec(kv[1]))[0]
    spans = find_numbers(p)
    values = [dec(s.text) for s in spans]
    if op == "compare":
        return ordered(spans, lambda s: dec(s.text), direction(q))[0].text
    if op in ("max", "min"):
        return fmt(max(values) if op == "max" else min(values))
    if op == "count":
        (t,) = numbers(q)
        return fmt(sum((v > t) if direction(q) else (v < t) for v in values))
    assert op == "sort"
    k = int(numbers(q)[0])
    return tuple(s.text for s in ordered(spans, lambda s: dec(s.text), "largest" in q)[:k])


def facts(passage: str) -> dict[str, list]:
    """Entity -> the numbers (or dates) of the one sentence that names only it."""
    out: dict[str, list] = {}
    for sentence in re.split(r"\.\s+", passage):
        names = [n for n in NAMES if n in sentence]
        if len(names) == 1:
            found = dates(sentence)
            out[names[0]] = found or numbers(sentence)
    return out


def expected_textual(ex: SynthExample) -> str | tuple[str, ...]:
    p, q, op = ex.passage, ex.question, ex.op
    table = facts(p)
    asked = sorted((n for n in NAMES if n in q), key=q.index)
    if op == "date_diff":
        d1, d2 = table[asked[0]]
        return fmt(years_between(d1, d2) if "years" in q else (d2 - d1).days)
    if "first half" in p:  # one team, its first- and second-half scores
        first, second = table[asked[0]]
        if op == "add":
            return fmt(first + second)
        return fmt(first - second if "first half than" in q else second - first)
    value = {name: nums[0] for name, nums in table.items()}
    if op == "add":
        return fmt(sum(value[n] for n in asked))
    if op == "subtract":
        return fmt(value[asked[0]] - value[asked[1]])
    if op == "compare":
        return ordered(asked, value.get, direction(q))[0]
    if op in ("argmax", "argmin"):
        return ordered(list(value), value.get, op == "argmax")[0]
    if op in ("max", "min"):
        return fmt(max(value.values()) if op == "max" else min(value.values()))
    if op == "count":
        (t,) = numbers(q)
        return fmt(sum((v > t) if direction(q) else (v < t) for v in value.values()))
    assert op == "sort"
    k = int(find_numbers(q, words=True)[0].value)
    return tuple(ordered(list(value), value.get, direction(q))[:k])


# --- tests ------------------------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_data(tmp_path: Path) -> None:
    paths = [tmp_path / f"{name}.json" for name in ("a", "b", "c")]
    for path, seed in zip(paths, (5, 5, 6), strict=True):
        write_synthetic(path, generate("both", 300, seed))
    a, b, c = (path.read_bytes() for path in paths)
    assert a == b
    assert a != c
    questions = [{ex.question + ex.passage for ex in generate("both", 300, s)} for s in (5, 6)]
    assert len(questions[0] & questions[1]) < 30  # a few short ND items may coincide


def test_numeric_part_of_both_equals_numeric_alone() -> None:
    assert generate("both", 40, 3)[:20] == generate("numeric", 20, 3)


def test_every_answer_recomputed_from_the_text(examples: list[SynthExample]) -> None:
    assert Counter(ex.kind for ex in examples) == {"numeric": N, "textual": N}
    for ex in examples:
        want = (expected_numeric if ex.kind == "numeric" else expected_textual)(ex)
        got = ex.answer.texts[0] if isinstance(want, str) else ex.answer.spans
        assert got == want, (ex.op, ex.passage, ex.question, ex.answer)
        if ex.answer.kind in ("span", "spans"):
            assert all(span in ex.passage for span in ex.answer.spans)
        if ex.answer.number:
            assert not ex.answer.number.endswith(".0") and "," not in ex.answer.number


def test_file_reads_cleanly_and_gold_scores_em_1(
    tmp_path: Path, examples: list[SynthExample]
) -> None:
    path = tmp_path / "synth.json"
    write_synthetic(path, examples)
    ds = read_drop(path)
    assert len(ds) == len(examples)
    assert ds.report.skipped == {} and ds.report.warnings == {}
    assert [ex.id for ex in ds] == [ex.id for ex in examples]
    assert len(set(ds.passage_ids)) == len(examples)
    assert examples[0].id == "synth-numeric-7-0" and examples[-1].id == f"synth-textual-7-{N - 1}"
    raw = json.loads(path.read_text(encoding="utf-8"))
    preds = {ex.id: list(ex.answer.texts) if ex.answer.spans else ex.answer.texts[0] for ex in ds}
    score = drop_score(gold_from_drop_json(raw), preds)
    assert score["global_em"] == 1.0 and score["global_f1"] == 1.0
    assert set(score["per_type"]) == {"number", "span", "spans", "date"}


def test_operation_mix_follows_the_weights() -> None:
    cfg = SynthConfig(numeric_ops={"add": 3.0, "compare": 1.0, "percent": 0.0})
    ops = Counter(ex.op for ex in generate("numeric", 2000, 0, cfg))
    assert set(ops) == {"add", "compare"}
    assert 0.70 < ops["add"] / 2000 < 0.80
    default = Counter(ex.op for ex in generate("textual", 2000, 0))
    assert all(120 < count < 280 for count in default.values()) and len(default) == 10


def test_unknown_operation_names_the_closest() -> None:
    with pytest.raises(ValueError, match="did you mean 'subtract'"):
        SynthConfig(numeric_ops={"substract": 1.0})
    with pytest.raises(ValueError, match="unknown kind"):
        generate("numbers", 3, 0)


def test_numbers_follow_the_config() -> None:
    cfg = SynthConfig(int_range=(1000, 2000), decimal_prob=0.0, separator_prob=1.0)
    ops = {"add": 1.0, "max": 1.0}
    for ex in generate("numeric", 100, 1, SynthConfig(**{**vars(cfg), "numeric_ops": ops})):
        for n in find_numbers(ex.passage):
            assert re.fullmatch(r"1,\d{3}|2,000", n.text), ex.passage


@pytest.mark.parametrize(
    ("start", "end", "days", "years"),
    [
        (date(2000, 3, 1), date(2001, 3, 1), 365, 1),  # Feb 2001 is common
        (date(1999, 3, 1), date(2000, 3, 1), 366, 1),  # includes 29 Feb 2000
        (date(2000, 1, 1), date(2001, 1, 1), 366, 1),
        (date(2000, 2, 29), date(2001, 2, 28), 365, 0),
        (date(2000, 2, 29), date(2001, 3, 1), 366, 1),
        (date(1990, 6, 15), date(2004, 6, 14), 5113, 13),
    ],
)
def test_date_arithmetic_on_known_pairs(start: date, end: date, days: int, years: int) -> None:
    assert (end - start).days == days
    assert full_years(start, end) == years == years_between(start, end)


def test_canonical_number() -> None:
    assert canonical_number(Decimal("12.50")) == "12.5"
    assert canonical_number(Decimal("1204.00")) == "1204"
    assert canonical_number(Decimal("0.755")) == "0.76"  # half up
    assert canonical_number(0) == "0"
    assert canonical_number(Decimal("1E+3")) == "1000"


def test_drop_json_shape() -> None:
    doc = to_drop_json(generate("numeric", 1, 0))
    ((pid, entry),) = doc.items()
    assert pid == "synth-numeric-0-p0"
    (qa,) = entry["qa_pairs"]
    assert set(qa["answer"]) == {"number", "date", "spans"}
    assert set(qa["answer"]["date"]) == {"day", "month", "year"}


def test_cli_writes_file_and_prints_summary(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.json"
    assert main(["synth", "--out", str(out), "--kind", "textual", "--n", "50", "--seed", "2"]) == 0
    printed = capsys.readouterr().out
    assert "argmax" in printed and "spans" in printed
    ds = read_drop(out)
    assert len(ds) == 50 and all(ex.id.startswith("synth-textual-2-") for ex in ds)
