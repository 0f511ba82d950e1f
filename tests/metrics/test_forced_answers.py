"""scripts/forced_answers.py: SQuAD 2.0 span quality with abstention taken out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import load_script

GOLD = {
    "data": [
        {
            "paragraphs": [
                {
                    "context": "The Normans lived in Normandy in the 10th century.",
                    "qas": [
                        {
                            "id": "a",
                            "question": "Who?",
                            "answers": [{"text": "The Normans", "answer_start": 0}],
                        },
                        {
                            "id": "b",
                            "question": "When?",
                            "answers": [{"text": "10th century", "answer_start": 37}],
                        },
                        {"id": "c", "question": "Why?", "answers": [], "is_impossible": True},
                    ],
                }
            ]
        }
    ]
}


def _run_dir(tmp_path: Path, nbest: dict, preds: dict, odds: dict) -> Path:
    best = tmp_path / "exp" / "variant=x,seed=0" / "best"
    best.mkdir(parents=True)
    (best / "nbest_predictions.json").write_text(json.dumps(nbest))
    (best / "predictions.json").write_text(json.dumps(preds))
    (best / "null_odds.json").write_text(json.dumps(odds))
    return best.parent


def test_an_abstaining_run_is_scored_on_its_best_span(tmp_path, capsys):
    script = load_script("forced_answers")
    gold_file = tmp_path / "gold.json"
    gold_file.write_text(json.dumps(GOLD))
    # the null answer is first in every n-best list; the best non-empty span is what counts
    nbest = {
        "a": [{"text": ""}, {"text": "Normans"}, {"text": "Normandy"}],
        "b": [{"text": ""}, {"text": "Normandy"}],
        "c": [{"text": ""}, {"text": "Normans"}],
    }
    # c (unanswerable) has higher null odds than a, lower than b: AUC 1/2
    run = _run_dir(tmp_path, nbest, {"a": "", "b": "", "c": ""}, {"a": 1.0, "b": 3.0, "c": 2.0})
    script.main([str(gold_file), str(run)])
    row = capsys.readouterr().out.splitlines()[-1]
    # a: "Normans" vs "The Normans" -> EM 1 after normalisation (articles dropped), F1 1;
    # b: "Normandy" vs "10th century" -> 0; c is unanswerable, left out
    assert row == "| exp/variant=x,seed=0 | 50.00 | 50.00 | 100.0 % | 100.0 % | 50.0 % |"


def test_forced_scores_count_a_missing_span_as_zero_and_need_an_answerable_question():
    script = load_script("forced_answers")
    gold = {"a": ["The Normans"], "b": ["10th century"], "c": []}
    has_ans = {q: bool(a) for q, a in gold.items()}
    scores = script.forced_scores(gold, has_ans, {"a": [{"text": "the Normans"}]})
    assert scores == {"forced_f1": pytest.approx(50.0), "forced_em": pytest.approx(50.0)}
    assert script.abstentions(has_ans, {"a": "x", "b": "", "c": ""}) == {
        "abstain_has_ans": pytest.approx(50.0),
        "abstain_no_ans": pytest.approx(100.0),
    }
    with pytest.raises(ValueError, match="no answerable question"):
        script.forced_scores({"c": []}, {"c": False}, {})


def test_no_answer_auc_ranks_unanswerable_above_answerable_with_ties_half():
    script = load_script("forced_answers")
    gold = {"a": True, "b": True, "c": False, "d": False}  # answerable?
    assert script.no_answer_auc(gold, {"a": 0.0, "b": 1.0, "c": 2.0, "d": 3.0}) == 100.0
    assert script.no_answer_auc(gold, {"a": 2.0, "b": 3.0, "c": 0.0, "d": 1.0}) == 0.0
    # c ties a (half), beats nothing else; d beats both: (0.5 + 0 + 1 + 1) / 4
    assert script.no_answer_auc(gold, {"a": 1.0, "b": 2.0, "c": 1.0, "d": 5.0}) == 62.5
    with pytest.raises(ValueError, match="answerable and unanswerable"):
        script.no_answer_auc({"a": True}, {"a": 0.0})


def test_null_odds_missing_a_question_name_the_file_and_the_question(tmp_path):
    script = load_script("forced_answers")
    gold_file = tmp_path / "gold.json"
    gold_file.write_text(json.dumps(GOLD))
    nbest = {q: [{"text": "Normans"}] for q in "abc"}
    run = _run_dir(tmp_path, nbest, {"a": "", "b": "", "c": ""}, {"a": 1.0, "c": 2.0})
    with pytest.raises(SystemExit, match=r"null_odds\.json: no null odds for 1 question.*'b'"):
        script.main([str(gold_file), str(run)])
