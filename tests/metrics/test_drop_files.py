"""DROP scoring of whole files (`structqa score`) and agreement with the official evaluation."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from drop_reference import ENV, load_reference
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drop_metric import _overlapping, ans, approx

from structqa.metrics.drop import (
    answer_json_to_strings,
    drop_question_scores,
    drop_score,
    get_metrics,
    gold_from_drop_json,
    normalize_answer,
)
from structqa.scoring import compare_files, score_file

CONTRAST = "drop/drop-contrast-sets.json"


# --------------------------------------------------------------------------------------------
# Real file and `structqa score`
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contrast_path(shared_data: Path) -> Path:
    return shared_data / CONTRAST


@pytest.fixture(scope="module")
def contrast_json(contrast_path: Path) -> dict[str, Any]:
    return json.loads(contrast_path.read_text(encoding="utf-8"))


def _gold_prediction(answer: dict[str, Any]) -> str | list[str]:
    texts, _ = answer_json_to_strings(answer)
    return texts[0] if len(texts) == 1 else list(texts)


def test_contrast_sets_perfect_predictions(contrast_json: dict[str, Any]) -> None:
    gold = gold_from_drop_json(contrast_json)
    assert len(gold) == 947
    first_types = [candidates[0].kind for candidates in gold.values()]
    assert {k: first_types.count(k) for k in set(first_types)} == {
        "number": 452,
        "span": 431,
        "spans": 46,
        "date": 18,
    }
    preds = {
        qa["query_id"]: _gold_prediction(qa["answer"])
        for passage in contrast_json.values()
        for qa in passage["qa_pairs"]
    }
    result = drop_score(gold, preds)
    assert (result["global_em"], result["global_f1"], result["total"]) == (1.0, 1.0, 947)
    # The credited type is the last candidate reaching the max: two date answers whose
    # validated answer is the same year as a number ("1615", "1560") count as numbers, and
    # one whose validated answer is the span "11 June 1734" counts as a span.
    counts = {kind: block["count"] for kind, block in result["per_type"].items()}
    assert counts == {"date": 15, "number": 454, "span": 432, "spans": 46}


def test_score_file_and_cli_on_drop(
    tmp_path: Path, contrast_path: Path, contrast_json: dict[str, Any], capsys
) -> None:
    from structqa.cli import main

    qas = [qa for passage in contrast_json.values() for qa in passage["qa_pairs"]]
    preds = {qa["query_id"]: _gold_prediction(qa["answer"]) for qa in qas[::2]}
    pred_path = tmp_path / "preds.json"
    pred_path.write_text(json.dumps(preds), encoding="utf-8")
    result = score_file(contrast_path, pred_path)
    assert result["global_em"] == approx(474 / 947)
    assert result["global_f1"] == approx(474 / 947)
    assert sum(block["count"] for block in result["per_type"].values()) == 947
    assert main(["score", str(contrast_path), str(pred_path)]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(result))
    with pytest.raises(ValueError, match="na-probs"):
        score_file(contrast_path, pred_path, na_probs=pred_path)


def test_score_by_a_field_groups_the_questions_and_names_a_question_without_it(
    tmp_path: Path, capsys
) -> None:
    from structqa.cli import main

    def qa(qid: str, number: str, subset: str | None) -> dict[str, Any]:
        out = {"query_id": qid, "question": "How many?", "answer": ans(number)}
        return out if subset is None else {**out, "subset": subset}

    data = {
        "p1": {
            "passage": "Two and three.",
            "qa_pairs": [qa("a", "5", "addsub"), qa("b", "1", "addsub")],
        },
        "p2": {"passage": "Six by two.", "qa_pairs": [qa("c", "12", "multiarith")]},
    }
    data_path = tmp_path / "mwp.json"
    data_path.write_text(json.dumps(data), encoding="utf-8")
    pred_path = tmp_path / "preds.json"
    pred_path.write_text(json.dumps({"a": "5", "b": "2", "c": "12"}), encoding="utf-8")
    result = score_file(data_path, pred_path, by="subset")
    assert result["global_em"] == approx(2 / 3)
    assert result["per_subset"] == {
        "addsub": {"count": 2, "em": approx(0.5), "f1": approx(0.5)},
        "multiarith": {"count": 1, "em": approx(1.0), "f1": approx(1.0)},
    }
    assert main(["score", str(data_path), str(pred_path), "--by", "subset"]) == 0
    assert json.loads(capsys.readouterr().out)["per_subset"]["addsub"]["count"] == 2
    # the answers of two test folds, read as one
    fold_a, fold_b = tmp_path / "fold0.json", tmp_path / "fold1.json"
    fold_a.write_text(json.dumps({"a": "5", "b": "2"}), encoding="utf-8")
    fold_b.write_text(json.dumps({"c": "12"}), encoding="utf-8")
    assert score_file(data_path, [fold_a, fold_b], by="subset") == result
    assert main(["score", str(data_path), str(fold_a), str(fold_b), "--by", "subset"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(result))
    with pytest.raises(ValueError, match="question 'a' is answered in .*fold0.json too"):
        score_file(data_path, [fold_a, fold_a])
    # and compared as one run against another system's folds
    wrong_a, wrong_b = tmp_path / "wrong0.json", tmp_path / "wrong1.json"
    wrong_a.write_text(json.dumps({"a": "0", "b": "0"}), encoding="utf-8")
    wrong_b.write_text(json.dumps({"c": "0"}), encoding="utf-8")
    c = compare_files(data_path, [fold_a, fold_b], [wrong_a, wrong_b], metric="em", parts=2)
    assert c.bootstrap.n_runs == 1 and c.bootstrap.n_questions == 3
    assert c.bootstrap.difference == approx(100 * 2 / 3)
    with pytest.raises(ValueError, match="multiple of 2 files"):
        compare_files(data_path, [fold_a, fold_b], [wrong_a], parts=2)
    data["p2"]["qa_pairs"].append(qa("d", "3", None))
    data_path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"passage 'p2', question 1 \('d'\) has no field 'subset'"):
        score_file(data_path, pred_path, by="subset")


# --------------------------------------------------------------------------------------------
# Independent reference: the official DROP evaluation from the allennlp-models wheel
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    mod = load_reference()
    if mod is None:
        pytest.skip(
            f"official DROP evaluation not available; set {ENV} to the "
            "allennlp-models 2.10.1 wheel (pip download --no-deps allennlp-models==2.10.1)"
        )
    return mod


_TYPE_LINE = re.compile(r"^(\w+): (\d+) \(")
_SCORE_LINE = re.compile(r"^  (Exact-match accuracy|F1 score) (-?[\d.]+|nan)$")


def _reference_evaluate(
    ref: ModuleType, annotations: dict[str, Any], preds: dict[str, Any]
) -> tuple[float, float, dict[str, dict[str, float]]]:
    """The official evaluate_json: global EM/F1 as returned, per type parsed from its report
    (count, and EM/F1 in % with 3 decimals)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        em, f1 = ref.evaluate_json(annotations, preds)
    per_type: dict[str, dict[str, float]] = {}
    current = ""
    for line in out.getvalue().splitlines():
        if match := _TYPE_LINE.match(line):
            current = match.group(1)
            per_type[current] = {"count": int(match.group(2))}
        elif (match := _SCORE_LINE.match(line)) and current:
            key = "em" if match.group(1).startswith("Exact") else "f1"
            per_type[current][key] = float(match.group(2))
    return float(em), float(f1), per_type


def _perturb_number(rng: random.Random, number: str) -> str:
    try:
        value = float(number)
    except ValueError:
        return number + "0"
    choice = rng.random()
    if choice < 0.2:
        return f"{value:,.0f}" if value == int(value) else f"{value:,}"
    if choice < 0.35:
        return f"{value:.1f}"
    if choice < 0.5:
        return f"{int(value) + rng.choice([-1, 1, 10])}"
    if choice < 0.6:
        return f"{value * 10:g}"
    if choice < 0.7:
        return rng.choice(["$", "", "about "]) + number + rng.choice(["%", " yards", ".", ""])
    if choice < 0.8:
        return f"{number}-yard"
    return number


def _random_prediction(rng: random.Random, qa: dict[str, Any], passage: str) -> str | list[str]:
    candidates = [qa["answer"], *(qa.get("validated_answers") or [])]
    texts, _ = answer_json_to_strings(rng.choice(candidates))
    words = passage.split()
    choice = rng.random()
    if choice < 0.15:
        return texts[0] if len(texts) == 1 else list(texts)
    if choice < 0.3:
        return (
            [_perturb_number(rng, t) for t in texts]
            if len(texts) > 1
            else _perturb_number(rng, texts[0])
        )
    if choice < 0.45:  # partial spans, with case/punctuation/article noise
        parts = []
        for text in texts:
            toks = text.split()
            cut = rng.randint(0, max(len(toks) - 1, 0))
            part = " ".join(toks[cut:] if rng.random() < 0.5 else toks[: cut + 1])
            parts.append(rng.choice(["", "the ", "A "]) + part.upper() + rng.choice(["", ".", ","]))
        return parts if len(parts) > 1 or rng.random() < 0.3 else parts[0]
    if choice < 0.6:  # lists of spans: subsets, shuffles, duplicates, extras, splits
        spans = list(texts) if len(texts) > 1 else texts[0].replace(" and ", ", ").split(", ")
        rng.shuffle(spans)
        if rng.random() < 0.3:
            spans = spans[: rng.randint(0, len(spans))]
        if rng.random() < 0.3:
            spans.append(rng.choice(spans) if spans else rng.choice(words))
        if rng.random() < 0.3:
            spans.append(" ".join(words[(i := rng.randrange(len(words))) : i + 3]))
        return spans
    if choice < 0.7:
        return rng.choice(["", " ", "the", "-", "0", "nan", [], [""], ["", "x"]])
    if choice < 0.8:  # numbers and dates written in other ways
        text = texts[0]
        return rng.choice(
            [text.replace(" ", ", "), text.replace(" ", "-"), f"{text} {text}", text.lower()]
        )
    start = rng.randrange(len(words))
    return " ".join(words[start : start + rng.randint(1, 8)])


def _random_predictions(
    contrast_json: dict[str, Any], seed: int, drop_share: float = 0.05
) -> dict[str, Any]:
    rng = random.Random(seed)
    preds: dict[str, Any] = {}
    for passage in contrast_json.values():
        for qa in passage["qa_pairs"]:
            if rng.random() >= drop_share:  # leave a few questions without a prediction
                preds[qa["query_id"]] = _random_prediction(rng, qa, passage["passage"])
    return preds


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_on_contrast_sets(
    ref: ModuleType, contrast_json: dict[str, Any], seed: int
) -> None:
    preds = _random_predictions(contrast_json, seed)
    em, f1, per_type = _reference_evaluate(ref, contrast_json, preds)
    ours = drop_score(gold_from_drop_json(contrast_json), preds)
    assert ours["global_em"] == pytest.approx(em, abs=1e-6)
    assert ours["global_f1"] == pytest.approx(f1, abs=1e-6)
    assert 0.05 < ours["global_f1"] < 0.95  # the predictions are a real mix
    assert list(ours["per_type"]) == list(per_type)
    for kind, block in per_type.items():
        mine = ours["per_type"][kind]
        assert mine["count"] == block["count"], kind
        # The official report prints % with 3 decimals: agreement to half a unit of that.
        assert 100 * mine["em"] == pytest.approx(block["em"], abs=5.01e-4), kind
        assert 100 * mine["f1"] == pytest.approx(block["f1"], abs=5.01e-4), kind


def test_per_question_matches_reference(ref: ModuleType, contrast_json: dict[str, Any]) -> None:
    preds = _random_predictions(contrast_json, seed=7)
    ours = drop_question_scores(gold_from_drop_json(contrast_json), preds)
    kinds_differ = 0
    for passage_id, passage in contrast_json.items():
        for qa in passage["qa_pairs"]:
            one = {passage_id: {**passage, "qa_pairs": [qa]}}
            em, f1, per_type = _reference_evaluate(ref, one, preds)
            mine = ours[qa["query_id"]]
            assert (mine.em, mine.f1) == (pytest.approx(em, abs=1e-6), pytest.approx(f1, abs=1e-6))
            assert list(per_type) == [mine.kind], qa["query_id"]
            if qa["query_id"] in preds:
                em_one, f1_one = ref.get_metrics(
                    preds[qa["query_id"]], answer_json_to_strings(qa["answer"]).texts
                )
                assert get_metrics(
                    preds[qa["query_id"]], answer_json_to_strings(qa["answer"]).texts
                ) == (em_one, pytest.approx(f1_one, abs=1e-12))
            kinds_differ += mine.kind != answer_json_to_strings(qa["answer"]).kind
    # Some questions move type with the prediction (validated answers of another type).
    assert kinds_differ > 0


def test_score_file_matches_reference_prediction_file(
    ref: ModuleType, tmp_path: Path, contrast_path: Path, contrast_json: dict[str, Any]
) -> None:
    pred_path = tmp_path / "preds.json"
    pred_path.write_text(json.dumps(_random_predictions(contrast_json, seed=3)), encoding="utf-8")
    out_path = tmp_path / "official.json"
    with contextlib.redirect_stdout(io.StringIO()):
        ref.evaluate_prediction_file(str(pred_path), str(contrast_path), str(out_path))
    official = json.loads(out_path.read_text(encoding="utf-8"))
    ours = score_file(contrast_path, pred_path)
    assert set(official) == {"global_em", "global_f1"}
    for key, value in official.items():
        assert ours[key] == pytest.approx(value, abs=1e-6), key


def test_get_metrics_matches_reference_on_hand_cases(ref: ModuleType) -> None:
    cases: list[tuple[Any, Any]] = [
        (["x y z", "y"], ["x y", "x"]),
        (["u v", "v"], ["u", "u v"]),
        (["w x y", "w", "y z"], ["x y z", "w y z", "w x y"]),
        (["2", "3", "1"], ["1", "2", "3-yard"]),
        ("14,506", "14506.0"),
        ("3.5%", "35"),
        ("", "5"),
        ([], ["a", "b"]),
        ("June 11, 1734", ["11 June 1734"]),
        (["43-yard", "54-yard", "57-yard"], ["43-yard", "54-yard", "54-yard", "57-yard"]),
        _overlapping(21, 40),
        _overlapping(3, 40),
    ]
    for pred, gold in cases:
        assert get_metrics(pred, gold) == ref.get_metrics(pred, gold), (pred, gold)
        for text in [pred] if isinstance(pred, str) else pred:
            assert normalize_answer(text) == ref._normalize_answer(text)


# Words that exercise every normalisation rule; joined by spaces, hyphens or nothing.
_WORDS = st.sampled_from(
    "the a An Bears bears yard 1 14 14,506 14506.0 3.5% $5 5. - -- 1e3 nan inf June 1985 x "
    "it's 0.5 . ,".split()
)
_TEXT = st.lists(st.tuples(_WORDS, st.sampled_from([" ", "-", "", "  "])), max_size=6).map(
    lambda pairs: "".join(word + sep for word, sep in pairs)
)
_ANSWER = st.one_of(_TEXT, st.lists(_TEXT, max_size=4))


@pytest.mark.skipif(
    load_reference() is None, reason="official DROP evaluation not available (see `ref`)"
)
@settings(max_examples=400, deadline=None)
@given(pred=_ANSWER, gold=st.lists(_TEXT, min_size=1, max_size=4))
def test_get_metrics_matches_reference_property(pred: Any, gold: list[str]) -> None:
    ref = load_reference()
    assert ref is not None
    theirs = ref.get_metrics(pred, gold)
    assert get_metrics(pred, gold) == (theirs[0], pytest.approx(theirs[1], abs=1e-12))
