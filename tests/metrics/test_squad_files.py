"""SQuAD metrics on the real data files, and agreement with an independent official reference."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_squad_metrics import BEST_KEYS

from structqa.metrics.squad import (
    best_thresholds,
    gold_from_squad_json,
    raw_scores_v2,
    squad_v1,
    squad_v2,
)

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "squad"
V2_DEV_HALF = DATA_DIR / "squad-v2.0-dev-half.json"
XQUAD_EN = DATA_DIR / "xquad-en.v1.1.json"

REF_MODULE = "transformers.data.metrics.squad_metrics"
REF_REASON = (
    f"{REF_MODULE} (port of the official SQuAD v2.0 script) is not in the installed "
    "transformers; it was removed in transformers 5.x"
)


# --------------------------------------------------------------------------------------------
# Real files
# --------------------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        pytest.skip(f"data file {path} is not available")
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def v2_json() -> dict[str, Any]:
    return _load(V2_DEV_HALF)


@pytest.fixture(scope="module")
def xquad_json() -> dict[str, Any]:
    return _load(XQUAD_EN)


def _iter_qas(dataset: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from ({**qa, "context": paragraph["context"]} for qa in paragraph["qas"])


def test_real_files_perfect_predictions(
    v2_json: dict[str, Any], xquad_json: dict[str, Any]
) -> None:
    gold, has_ans = gold_from_squad_json(v2_json)
    assert (len(gold), sum(has_ans.values())) == (6078, 2910)
    preds = {qid: (texts[0] if texts else "") for qid, texts in gold.items()}
    rng = random.Random(0)
    na_probs = {qid: rng.random() for qid in gold}
    result = squad_v2(gold, preds, na_probs)
    assert result == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 6078,
        "HasAns_exact": 100.0,
        "HasAns_f1": 100.0,
        "HasAns_total": 2910,
        "NoAns_exact": 100.0,
        "NoAns_f1": 100.0,
        "NoAns_total": 3168,
        # Every answerable question adds 1 and every unanswerable one 0, so the running
        # score peaks (at 100%) on the last answerable question in na_prob order.
        "best_exact": 100.0,
        "best_exact_thresh": max(na_probs[qid] for qid in gold if has_ans[qid]),
        "best_f1": 100.0,
        "best_f1_thresh": max(na_probs[qid] for qid in gold if has_ans[qid]),
    }
    v1_gold, _ = gold_from_squad_json(xquad_json)
    assert len(v1_gold) == 1190
    v1_preds = {qid: texts[-1] for qid, texts in v1_gold.items()}
    assert squad_v1(v1_gold, v1_preds) == {"exact_match": 100.0, "f1": 100.0}


# --------------------------------------------------------------------------------------------
# Independent reference: transformers' port of the official v2.0 script
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    from official_reference import load_reference

    mod = load_reference()
    if mod is None:
        pytest.skip(REF_REASON + "; set STRUCTQA_SQUAD_REF_WHEEL to a transformers 4.x wheel")
    return mod


def _random_prediction(rng: random.Random, answers: list[str], context: str) -> str:
    """A prediction near one of ``answers`` or somewhere in ``context``."""
    words = context.split()
    choice = rng.random()
    base = rng.choice(answers) if answers else ""
    if not base or choice < 0.25:
        start = rng.randrange(len(words))
        return " ".join(words[start : start + rng.randint(1, 6)])
    if choice < 0.40:
        return base
    if choice < 0.50:
        prefix = rng.choice(["The ", "a ", "", "'"])
        return prefix + base.upper() + rng.choice([".", ",", "!?"])
    if choice < 0.65:
        toks = base.split()
        cut = rng.randint(0, max(len(toks) - 1, 0))
        return " ".join(toks[cut:] if rng.random() < 0.5 else toks[: cut + 1])
    if choice < 0.80:
        start = max(context.find(base), 0)
        lo = max(start - rng.randint(0, 20), 0)
        return context[lo : start + len(base) + rng.randint(0, 20)]
    if choice < 0.90:
        toks = base.split()
        return " ".join(toks + toks[: rng.randint(1, len(toks))])
    return rng.choice(["", "the", " ", "..."])


def _reference_v2(
    ref: ModuleType,
    dataset: list[dict[str, Any]],
    preds: Mapping[str, str],
    na_probs: Mapping[str, float] | None,
    thresh: float,
) -> dict[str, Any]:
    """The official v2.0 main(), composed from the reference module's functions."""
    qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for qa in _iter_qas(dataset)}
    exact_raw: dict[str, int] = {}
    f1_raw: dict[str, float] = {}
    for qa in _iter_qas(dataset):
        golds = [a["text"] for a in qa["answers"] if ref.normalize_answer(a["text"])] or [""]
        pred = preds[qa["id"]]
        exact_raw[qa["id"]] = max(ref.compute_exact(a, pred) for a in golds)
        f1_raw[qa["id"]] = max(ref.compute_f1(a, pred) for a in golds)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in preds}
    exact_thr = ref.apply_no_ans_threshold(exact_raw, probs, qid_to_has_ans, thresh)
    f1_thr = ref.apply_no_ans_threshold(f1_raw, probs, qid_to_has_ans, thresh)
    out = ref.make_eval_dict(exact_thr, f1_thr)
    has_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_qids = [k for k, v in qid_to_has_ans.items() if not v]
    if has_qids:
        ref.merge_eval(out, ref.make_eval_dict(exact_thr, f1_thr, qid_list=has_qids), "HasAns")
    if no_qids:
        ref.merge_eval(out, ref.make_eval_dict(exact_thr, f1_thr, qid_list=no_qids), "NoAns")
    if na_probs is not None:
        ref.find_all_best_thresh(out, preds, exact_raw, f1_raw, na_probs, qid_to_has_ans)
    return dict(out)


def _assert_same(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> None:
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v2_matches_reference_on_dev_file(
    ref: ModuleType, v2_json: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    dataset = v2_json["data"]
    preds: dict[str, str] = {}
    for qa in _iter_qas(dataset):
        pool = qa["answers"] or qa.get("plausible_answers", [])
        if not qa["answers"] and rng.random() < 0.5:
            pool = []
        preds[qa["id"]] = _random_prediction(rng, [a["text"] for a in pool], qa["context"])
    preds["not-in-dataset"] = "stray"
    ids = list(preds)
    rng.shuffle(ids)  # na_probs iteration order differs from the dataset's
    # Two decimals make many ties, exercising the stable sort.
    na_probs = {qid: round(rng.random(), 2) for qid in ids}
    gold, _ = gold_from_squad_json(v2_json)

    ref_exact = {
        qa["id"]: max(
            ref.compute_exact(a, preds[qa["id"]])
            for a in [x["text"] for x in qa["answers"] if ref.normalize_answer(x["text"])] or [""]
        )
        for qa in _iter_qas(dataset)
    }
    ours_exact, _ = raw_scores_v2(gold, preds)
    assert ours_exact == ref_exact
    for thresh in (1.0, 0.5, 0.37):
        _assert_same(
            squad_v2(gold, preds, na_probs, thresh),
            _reference_v2(ref, dataset, preds, na_probs, thresh),
        )
    _assert_same(squad_v2(gold, preds), _reference_v2(ref, dataset, preds, None, 1.0))
    expected_best = _reference_v2(ref, dataset, preds, na_probs, 1.0)
    best = best_thresholds(gold, preds, na_probs)
    _assert_same(best, {key: expected_best[key] for key in BEST_KEYS})


def _reference_v1(
    ref: ModuleType, dataset: list[dict[str, Any]], preds: Mapping[str, str]
) -> dict[str, float]:
    """evaluate-v1.1.py's evaluate(); its EM/F1 equal compute_exact/compute_f1 here because
    every prediction is non-empty after normalisation."""
    exact = f1 = 0.0
    total = 0
    for qa in _iter_qas(dataset):
        total += 1
        if qa["id"] not in preds:
            continue
        pred = preds[qa["id"]]
        assert ref.normalize_answer(pred)
        truths = [a["text"] for a in qa["answers"]]
        exact += max(ref.compute_exact(t, pred) for t in truths)
        f1 += max(ref.compute_f1(t, pred) for t in truths)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


@pytest.mark.parametrize("seed", [0, 1])
def test_v1_matches_reference_on_xquad(
    ref: ModuleType, xquad_json: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    dataset = xquad_json["data"]
    preds: dict[str, str] = {}
    for qa in _iter_qas(dataset):
        if rng.random() < 0.05:
            continue  # missing: scores 0
        pred = ""
        while not ref.normalize_answer(pred):
            pred = _random_prediction(rng, [a["text"] for a in qa["answers"]], qa["context"])
        preds[qa["id"]] = pred
    gold, _ = gold_from_squad_json(xquad_json)
    _assert_same(squad_v1(gold, preds), _reference_v1(ref, dataset, preds))
