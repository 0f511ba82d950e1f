"""Unanswerable questions made from answerable ones, for files that
have none.

SQuAD 2.0's unanswerable questions were written against their passage to look answerable;
its authors sort most of them into entity swaps, antonyms and negations (Rajpurkar et al.
2018, table 2). A model trained only on answerable questions never learns to abstain, and a
few hundred labelled unanswerable questions teach it little. These rules write such
questions from answerable ones, each kept only where the passage cannot ground the change:

- **entity**: a named entity of the question that the passage mentions is replaced by
  another entity of the same kind (person, place, date, ...) from another passage, one the
  passage does not mention ("When did Beyoncé ..." -> "When did Madonna ...").
- **antonym**: a word with an opposite in :data:`ANTONYMS` is replaced by it, where the
  passage does not use the opposite ("largest" -> "smallest").
- **negation**: "not" goes before the question's main verb, or after its copula, where the
  sentence holding the answer has no negation ("What did X build" -> "What did X not build").

Each answerable question gets at most one rewrite (the two swaps tried in a seeded order, then
negation), kept with probability ``rate``; the rewrite is a new question (``ID-neg-RULE``) with
no answer on the same passage. The rules are written out by hand: no antonym lexicon or
question generator is available offline, and these three patterns cover about half of SQuAD
2.0's unanswerable questions by its authors' count.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from structqa.data.overlap import drop_overlap, passage_key
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.data.squad_json import write_squad_json
from structqa.text.annotate import DEFAULT_MODEL, Annotation, Annotator

log = logging.getLogger(__name__)

RULES = ("entity", "antonym", "negation")
#: a rewrite's id is its question's id, this mark and its rule: ``ID-neg-RULE``
REWRITE_MARK = "-neg-"


def is_rewrite(question_id: str) -> bool:
    """Whether a question id names an unanswerable rewrite made here, not a person's question."""
    return REWRITE_MARK in question_id


#: entity labels worth swapping (spaCy's OntoNotes labels); numbers and amounts are left alone
SWAP_LABELS = frozenset(
    {
        "PERSON",
        "ORG",
        "GPE",
        "LOC",
        "NORP",
        "FAC",
        "EVENT",
        "WORK_OF_ART",
        "LAW",
        "LANGUAGE",
        "PRODUCT",
        "DATE",
    }
)

_PAIRS = """
first last; earliest latest; largest smallest; biggest smallest; highest lowest;
longest shortest; most least; more less; maximum minimum; before after; above below;
increase decrease; increased decreased; rise fall; rose fell; gain lose; gained lost;
win lose; won lost; north south; east west; northern southern; eastern western;
upper lower; inner outer; early late; earlier later; old new; older newer; oldest newest;
ancient modern; young old; younger older; youngest oldest; strong weak; stronger weaker;
strongest weakest; major minor; best worst; better worse; large small; larger smaller;
high low; higher lower; long short; longer shorter; open closed; opened closed; start end;
started ended; begin end; began ended; beginning end; public private; internal external;
positive negative; success failure; successful unsuccessful; legal illegal; rich poor;
wealthy poor; male female; men women; man woman; accept reject; accepted rejected;
allow forbid; allowed forbidden; include exclude; included excluded; import export;
imported exported; buy sell; bought sold; enter leave; entered left; win defeat;
victory defeat; support oppose; supported opposed; cheap expensive; cheapest dearest;
heavy light; heaviest lightest; fast slow; fastest slowest; hot cold; warm cool;
wet dry; deep shallow; wide narrow; common rare; frequent rare; same different;
similar different; true false; correct incorrect; possible impossible; top bottom
"""


def _antonyms() -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in _PAIRS.replace("\n", " ").split(";"):
        words = pair.split()
        if len(words) == 2:
            a, b = words
            out.setdefault(a, b)
            out.setdefault(b, a)
    return out


#: word -> its opposite, both ways (the first pair naming a word wins)
ANTONYMS = _antonyms()

_NEGATION = re.compile(r"\b(not|no|never|none|neither|nor|without)\b|n't\b", re.IGNORECASE)
_COPULAS = frozenset({"is", "are", "was", "were"})
_THE = re.compile(r"^the\s+", re.IGNORECASE)  # "the 2012 Conference" fits after any article
_DIGIT = re.compile(r"\d")  # a DATE worth swapping names a year or day, not "days"


@dataclass
class NegativesReport:
    """How many questions were read, rewritten (by rule), and left as they were."""

    questions: int = 0
    unanswerable_read: int = 0
    made: Counter = field(default_factory=Counter)
    no_rule_applied: int = 0
    skipped_by_rate: int = 0

    def summary(self) -> str:
        rules = ", ".join(f"{rule} {self.made[rule]}" for rule in RULES)
        return (
            f"{self.questions} questions read ({self.unanswerable_read} already unanswerable, "
            f"kept as they are); {sum(self.made.values())} unanswerable questions written "
            f"({rules}); {self.no_rule_applied} with no rule that applies, "
            f"{self.skipped_by_rate} left out by the rate"
        )


@dataclass(frozen=True)
class _Question:
    example: Example
    question: Annotation
    context: Annotation


def _in_passage(text: str, passage: str) -> bool:
    key = passage_key(text)
    return bool(key) and f" {key} " in f" {passage} "


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word.capitalize() if like[:1].isupper() else word


def swap_entity(
    q: _Question, passage: str, pool: dict[str, list[str]], rng: random.Random
) -> str | None:
    """The question with one of its grounded entities replaced by an ungrounded one."""
    text = q.example.question
    ents = [e for e in q.question.entities if e[2] in SWAP_LABELS]
    rng.shuffle(ents)
    for start, end, label in ents:
        if not _in_passage(text[start:end], passage):
            continue
        candidates = [c for c in pool.get(label, ()) if not _in_passage(c, passage)]
        if candidates:
            return text[:start] + rng.choice(candidates) + text[end:]
    return None


def swap_antonym(q: _Question, passage: str, rng: random.Random) -> str | None:
    """The question with one word replaced by its opposite, which the passage does not use."""
    text = q.example.question
    words = [(a, b) for a, b in q.question.words if text[a:b].lower() in ANTONYMS]
    rng.shuffle(words)
    for a, b in words:
        opposite = ANTONYMS[text[a:b].lower()]
        if not _in_passage(opposite, passage):
            return text[:a] + _match_case(opposite, text[a:b]) + text[b:]
    return None


def negate(q: _Question) -> str | None:
    """The question with "not" before its main verb (after an auxiliary) or after its copula;
    None where the question or the answer's sentence already holds a negation."""
    ex = q.example
    text = ex.question
    if _NEGATION.search(text) or not ex.answers:
        return None
    start = ex.answers[0].start
    sentence = next((ex.context[a:b] for a, b in q.context.sentences if a <= start < b), "")
    if _NEGATION.search(sentence):
        return None
    pos, words = q.question.pos, q.question.words
    for i, tag in enumerate(pos):
        if tag != "AUX":
            continue
        verb = next((j for j in range(i + 1, len(pos)) if pos[j] == "VERB"), None)
        if verb is not None:
            at = words[verb][0]
            return text[:at] + "not " + text[at:]
        a, b = words[i]
        if text[a:b].lower() in _COPULAS:
            return text[:b] + " not" + text[b:]
        return None
    return None


def entity_pool(annotated: Sequence[_Question]) -> dict[str, list[str]]:
    """Entity strings by label, from every passage and question, each string once."""
    pool: dict[str, dict[str, None]] = {}
    for q in annotated:
        for ann, text in ((q.context, q.example.context), (q.question, q.example.question)):
            for a, b, label in ann.entities:
                name = _THE.sub("", text[a:b].strip())
                if label in SWAP_LABELS and (label != "DATE" or _DIGIT.search(name)):
                    pool.setdefault(label, {})[name] = None
    return {label: sorted(names) for label, names in pool.items()}


def make_negatives(
    examples: Sequence[Example],
    annotate: Callable[[list[str]], list[Annotation]],
    rate: float = 1.0,
    seed: int = 0,
) -> tuple[list[Example], NegativesReport]:
    """Unanswerable rewrites of ``examples``' answerable questions (see the module's text).

    ``annotate`` parses texts (:class:`structqa.text.annotate.Annotator`); the same
    ``examples``, ``rate`` and ``seed`` give the same questions."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate {rate}: give a fraction between 0 and 1")
    report = NegativesReport(questions=len(examples))
    answerable = [ex for ex in examples if not ex.is_impossible]
    report.unanswerable_read = len(examples) - len(answerable)
    questions = annotate([ex.question for ex in answerable])
    unique = list(dict.fromkeys(ex.context for ex in answerable))
    contexts = dict(zip(unique, annotate(unique), strict=True))
    annotated = [
        _Question(ex, qa, contexts[ex.context])
        for ex, qa in zip(answerable, questions, strict=True)
    ]
    pool = entity_pool(annotated)
    rng = random.Random(seed)
    out: list[Example] = []
    for q in annotated:
        if rng.random() >= rate:
            report.skipped_by_rate += 1
            continue
        passage = passage_key(q.example.context)
        # the swaps first, in a seeded order; negation, the easiest to spot, only where
        # neither applies (SQuAD 2.0 has about four swaps for every negation)
        order = ["entity", "antonym"]
        rng.shuffle(order)
        order.append("negation")
        for rule in order:
            if rule == "entity":
                rewrite = swap_entity(q, passage, pool, rng)
            elif rule == "antonym":
                rewrite = swap_antonym(q, passage, rng)
            else:
                rewrite = negate(q)
            if rewrite is not None and rewrite != q.example.question:
                report.made[rule] += 1
                out.append(
                    replace(
                        q.example,
                        id=f"{q.example.id}{REWRITE_MARK}{rule}",
                        question=rewrite,
                        answers=(),
                        gold_texts=(),
                        is_impossible=True,
                    )
                )
                break
        else:
            report.no_rule_applied += 1
    return out, report


def write_negatives(
    source: str | Path,
    out: str | Path,
    exclude: Sequence[str | Path] = (),
    rate: float = 1.0,
    seed: int = 0,
    spacy_model: str = DEFAULT_MODEL,
) -> NegativesReport:
    """Read ``source``, drop the passages of ``exclude``, and write its questions and their
    unanswerable rewrites to ``out`` as SQuAD v2.0 JSON."""
    examples = list(read_extractive(source).examples)
    if exclude:
        examples, dropped = drop_overlap(examples, exclude)
        log.info("--exclude: %s: %s", source, dropped.summary())
    if not any(not ex.is_impossible for ex in examples):
        raise ValueError(f"{source}: no answerable question to rewrite")
    annotator = Annotator(spacy_model)
    made, report = make_negatives(examples, annotator.annotate, rate, seed)
    # grouped by passage; SQuAD 2.0 even if nothing was written
    write_squad_json(out, [*examples, *made])
    return report
