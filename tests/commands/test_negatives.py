"""`structqa negatives`: unanswerable rewrites of answerable questions, with the real spaCy
pipeline; each rule keeps only changes the passage cannot ground, and the written file trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.readers import read_extractive
from structqa.data.records import Answer, Example
from structqa.training.negatives import ANTONYMS, make_negatives, write_negatives

pytest.importorskip("spacy")
from structqa.text.annotate import Annotator  # noqa: E402

OWN_DATA = Path(__file__).resolve().parents[1] / "data" / "files" / "own-data"
TRAIN = OWN_DATA / "bees-train.json"


@pytest.fixture(scope="module")
def annotate():
    return Annotator().annotate


def example(qid: str, question: str, context: str, answer: str) -> Example:
    start = context.index(answer)
    return Example(qid, question, context, (Answer(answer, start),), (answer,))


PARIS = (
    "Paris is the largest city of France. Victor Hugo, who never lived in Madrid, wrote "
    "Les Misérables there in 1862."
)
MADRID = "Madrid is the capital of Spain. Miguel de Cervantes wrote Don Quixote in 1605."


def test_each_rule_writes_an_unanswerable_question_the_passage_does_not_ground(annotate):
    examples = [
        example("e", "When did Victor Hugo write Les Misérables?", PARIS, "1862"),
        example("a", "What is the largest city of France?", PARIS, "Paris"),
        example("n", "Who wrote Don Quixote in 1605?", MADRID, "Miguel de Cervantes"),
        # no entity, no word with an opposite: only negation can apply
        example(
            "v", "What did the writer compose there?", "There the writer composed a song.", "a song"
        ),
    ]
    rules: set[str] = set()
    for seed in range(6):
        made, report = make_negatives(examples, annotate, seed=seed)
        assert sum(report.made.values()) == len(made)
        for q in made:
            source = next(e for e in examples if q.id.startswith(e.id + "-neg-"))
            rule = q.id.rsplit("-", 1)[1]
            rules.add(rule)
            assert q.is_impossible and not q.answers and not q.gold_texts
            assert q.context == source.context and q.question != source.question
            if rule == "antonym":
                assert q.question == "What is the smallest city of France?"
            elif rule == "negation":
                assert q.question.replace(" not", "", 1) == source.question
            else:  # a name of the other passage in place of one this passage holds
                other = MADRID if source.context == PARIS else PARIS
                new = set(q.question.split()) - set(source.question.split())
                assert new and all(w.strip("?") in other for w in new)
        assert any(q.id == "v-neg-negation" for q in made)
    assert rules == {"entity", "antonym", "negation"}
    assert ANTONYMS["largest"] == "smallest" and ANTONYMS["smallest"] == "largest"


def test_no_rewrite_where_the_passage_grounds_every_change(annotate):
    # the passage names both "first" and "last", has a negation in the answer's sentence,
    # and the question has no entity: nothing can be rewritten
    context = "The first train and the last train do not stop at the old station."
    ex = example(
        "x", "Where do the first train and the last train stop?", context, "the old station"
    )
    made, report = make_negatives([ex], annotate, seed=0)
    assert made == [] and report.no_rule_applied == 1


def test_the_same_seed_gives_the_same_file_and_the_rate_thins_it(annotate):
    pool = list(read_extractive(TRAIN).examples)
    first, report = make_negatives(pool, annotate, seed=3)
    again, _ = make_negatives(pool, annotate, seed=3)
    assert [(q.id, q.question) for q in first] == [(q.id, q.question) for q in again]
    assert len(first) > len(pool) // 2  # most bee questions get a rewrite
    none, thin = make_negatives(pool, annotate, rate=0.0, seed=3)
    assert none == [] and thin.skipped_by_rate == len(pool)
    with pytest.raises(ValueError, match="between 0 and 1"):
        make_negatives(pool, annotate, rate=1.5)


def test_the_command_writes_squad2_that_reads_back(tmp_path, capsys):
    out = tmp_path / "neg.json"
    assert main(["negatives", str(TRAIN), "--out", str(out)]) == 0
    assert "unanswerable questions written" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["version"] == "v2.0"
    ds = read_extractive(out)
    original = {e.id: e for e in read_extractive(TRAIN).examples}
    rewrites = [e for e in ds.examples if e.is_impossible]
    kept = [e for e in ds.examples if not e.is_impossible]
    assert {e.id: e.answers for e in kept} == {i: e.answers for i, e in original.items()}
    assert rewrites and all(e.id.split("-neg-")[0] in original for e in rewrites)


def test_excluded_passages_are_dropped_before_rewriting(tmp_path):
    pool = list(read_extractive(TRAIN).examples)
    held = tmp_path / "held.json"
    paragraph = {
        "context": pool[0].context,
        "qas": [{"id": "h", "question": "Q?", "answers": [], "is_impossible": True}],
    }
    held.write_text(
        json.dumps({"version": "v2.0", "data": [{"title": "h", "paragraphs": [paragraph]}]})
    )
    out = tmp_path / "neg.json"
    write_negatives(TRAIN, out, exclude=[held])
    assert pool[0].context not in {e.context for e in read_extractive(out).examples}
