"""SpanCollector against a brute-force double loop over every span of every window."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from structqa.data.records import Example
from structqa.decoding import Candidate, DecodeConfig, Prediction, SpanCollector, word_span
from structqa.features.batching import collate
from structqa.features.squad import Feature
from structqa.heads.base import NEG, HeadOutput, masked_start_end

N_QUESTION = 2


def make_example(index: int, words: Sequence[str]) -> Example:
    return Example(id=f"q{index}", question="what?", context=" ".join(words))


def windows(example_index: int, words: Sequence[str], size: int, overlap: int) -> list[Feature]:
    """Doc-stride windows of ``size`` words sharing ``overlap`` words; one token per word,
    laid out as [CLS] q q [SEP] words.. [SEP]."""
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    out, first = [], 0
    while True:
        chunk = list(range(first, min(first + size, len(words))))
        n = N_QUESTION + len(chunk) + 3
        offsets = np.full((n, 2), -1, dtype=np.int64)
        for t, w in enumerate(chunk):
            offsets[N_QUESTION + 2 + t] = (starts[w], starts[w] + len(words[w]))
        types = np.zeros(n, dtype=np.int64)
        types[N_QUESTION + 2 :] = 1
        out.append(Feature(example_index, np.arange(n, dtype=np.int64), types, offsets))
        if chunk[-1] == len(words) - 1:
            return out
        first += size - overlap


def brute_force(
    ex: Example,
    feats: Sequence[tuple[int, Feature]],
    logits: dict[int, tuple[np.ndarray, np.ndarray]],
    cfg: DecodeConfig,
) -> tuple[list[tuple[str, float]], float]:
    """n-best distinct texts (best score per text) and the null score, by double loop."""
    best: dict[str, float] = {}
    null = math.inf
    for f_index, f in feats:
        start, end = logits[f_index]
        null = min(null, float(start[0]) + float(end[0]))
        context = [t for t in range(len(f)) if f.offsets[t, 0] >= 0]
        for i in context:
            for j in context:
                if i <= j and j - i < cfg.max_answer_length:
                    text = ex.context[f.offsets[i, 0] : f.offsets[j, 1]]
                    score = float(start[i]) + float(end[j])
                    best[text] = max(best.get(text, -math.inf), score)
    ranked = sorted(best.items(), key=lambda kv: -kv[1])[: cfg.n_best]
    return ranked, null


def run_collector(
    examples: Sequence[Example],
    features: Sequence[Feature],
    batches: Sequence[list[int]],
    cfg: DecodeConfig,
    seed: int,
    mask_logits: bool,
) -> tuple[dict[str, Prediction], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Random logits (also on padding and question tokens) fed batch by batch."""
    g = torch.Generator().manual_seed(seed)
    collector = SpanCollector(cfg)
    logits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for idx in batches:
        batch = collate(features, idx)
        start = 3 * torch.randn(batch.input_ids.shape, generator=g)
        end = 3 * torch.randn(batch.input_ids.shape, generator=g)
        if mask_logits:
            start, end = masked_start_end(start, end, batch)
        for row, f in enumerate(idx):
            n = len(features[f])
            logits[f] = (start[row, :n].double().numpy(), end[row, :n].double().numpy())
        collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    return collector.predictions(examples, features), logits


def corpus() -> tuple[list[Example], list[Feature]]:
    """Four examples with 1 to 6 overlapping windows; words are distinct within an example."""
    examples, features = [], []
    for e, (n_words, size, overlap) in enumerate([(23, 8, 3), (7, 8, 3), (40, 10, 4), (2, 8, 3)]):
        words = [f"e{e}w{i}" + "x" * (i % 3) for i in range(n_words)]
        examples.append(make_example(e, words))
        features.extend(windows(e, words, size, overlap))
    return examples, features


@pytest.mark.parametrize("mask_logits", [False, True], ids=["raw", "masked"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collector_matches_brute_force(seed: int, mask_logits: bool) -> None:
    examples, features = corpus()
    assert [sum(f.example_index == e for f in features) for e in range(4)] == [4, 1, 6, 1]
    cfg = DecodeConfig(n_best=6, max_answer_length=4, candidates="all")
    order = np.random.default_rng(seed).permutation(len(features)).tolist()
    batches = [order[:5], order[5:9], order[9:]]  # windows of one example in several batches
    preds, logits = run_collector(examples, features, batches, cfg, seed, mask_logits)
    assert sorted(preds) == ["q0", "q1", "q2", "q3"]
    for e, ex in enumerate(examples):
        mine = [(i, f) for i, f in enumerate(features) if f.example_index == e]
        ranked, null = brute_force(ex, mine, logits, cfg)
        pred = preds[ex.id]
        assert pred.text == ranked[0][0]
        assert pred.score == pytest.approx(ranked[0][1], abs=1e-5)
        assert [c.text for c in pred.nbest] == [t for t, _ in ranked]
        assert [c.score for c in pred.nbest] == pytest.approx([s for _, s in ranked], abs=1e-5)
        assert pred.null_score == pytest.approx(null, abs=1e-5)
        assert pred.null_odds == pytest.approx(null - ranked[0][1], abs=1e-5)
        # probabilities: a softmax over the n-best scores
        z = np.exp(np.array([s for _, s in ranked]) - ranked[0][1])
        probs = [c.probability for c in pred.nbest]
        assert probs == pytest.approx((z / z.sum()).tolist(), abs=1e-6)
        assert sum(probs) == pytest.approx(1.0, abs=1e-9)
        for c in pred.nbest:
            assert ex.context[c.start_char : c.end_char] == c.text
        assert (pred.start_char, pred.end_char) == (
            pred.nbest[0].start_char,
            pred.nbest[0].end_char,
        )


def test_two_word_context_lists_every_span_when_n_best_is_large() -> None:
    examples, features = corpus()
    three = [i for i, f in enumerate(features) if f.example_index == 3]
    preds, _ = run_collector(
        examples, features, [three], DecodeConfig(n_best=20, max_answer_length=30), 0, False
    )
    assert sorted(c.text for c in preds["q3"].nbest) == sorted(["e3w0", "e3w1x", "e3w0 e3w1x"])
    assert set(preds) == {"q3"}  # only examples with a collected window are predicted


def test_max_answer_length_one_gives_single_words() -> None:
    examples, features = corpus()
    preds, _ = run_collector(
        examples, features, [list(range(len(features)))], DecodeConfig(5, 1), 3, True
    )
    for pred in preds.values():
        assert all(" " not in c.text for c in pred.nbest)


def test_window_without_context_gives_empty_prediction() -> None:
    ex = Example("empty", "what?", "")
    offsets = np.full((4, 2), -1, dtype=np.int64)
    f = Feature(0, np.arange(4), np.zeros(4, dtype=np.int64), offsets)
    collector = SpanCollector(DecodeConfig())
    start = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    end = torch.tensor([[0.5, 2.0, 3.0, 4.0]])
    batch = collate([f], [0])
    collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    pred = collector.predictions([ex], [f])["empty"]
    assert (pred.text, pred.start_char, pred.end_char, pred.nbest) == ("", -1, -1, ())
    assert pred.score == NEG
    assert pred.null_score == pytest.approx(1.5)
    assert pred.null_odds == pytest.approx(1.5 - NEG)
    assert pred.answer(0.0) == ""


def test_repeated_text_in_one_window_does_not_shrink_the_n_best() -> None:
    ex = make_example(0, ["x", "y", "x", "z"])
    (f,) = windows(0, ["x", "y", "x", "z"], size=8, overlap=3)
    # tokens: [CLS] q q [SEP] x y x z [SEP]; single-token spans scored 5 (x), 0 (y), 5 (x), 3 (z)
    start = torch.tensor([[0.0, 0, 0, 0, 5, 0, 5, 3, 0]])
    end = torch.zeros_like(start)
    collector = SpanCollector(DecodeConfig(n_best=2, max_answer_length=1, candidates="all"))
    batch = collate([f], [0])
    collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    pred = collector.predictions([ex], [f])["q0"]
    assert [c.text for c in pred.nbest] == ["x", "z"]


# ---- Prediction.answer ----------------------------------------------------------------------


def prediction(null_odds: float) -> Prediction:
    cand = Candidate("Denver Broncos", 10, 24, 7.0, 1.0)
    return Prediction("id", cand.text, 10, 24, 7.0, 7.0 + null_odds, null_odds, (cand,))


def test_answer_without_threshold_is_always_the_span() -> None:
    assert prediction(50.0).answer(None) == "Denver Broncos"


@pytest.mark.parametrize(
    ("null_odds", "threshold", "expected"),
    [
        (1.0, 0.0, ""),  # null beats the span by more than the threshold
        (-1.0, 0.0, "Denver Broncos"),
        (0.0, 0.0, "Denver Broncos"),  # ties keep the span (strictly greater abstains)
        (2.5, 3.0, "Denver Broncos"),
        (3.5, 3.0, ""),
        (-4.0, -5.0, ""),
    ],
)
def test_answer_threshold(null_odds: float, threshold: float, expected: str) -> None:
    assert prediction(null_odds).answer(threshold) == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_topk_candidates_equal_exact_search_when_the_shortlist_covers_the_window(
    seed: int,
) -> None:
    # windows hold at most 10 context tokens: with n_best 12 the best-12 starts and ends are
    # every context token, so BERT's shortlist finds exactly what the full search finds
    examples, features = corpus()
    order = np.random.default_rng(seed).permutation(len(features)).tolist()
    batches = [order[:5], order[5:]]
    exact, _ = run_collector(
        examples,
        features,
        batches,
        DecodeConfig(n_best=12, max_answer_length=4, candidates="all"),
        seed,
        True,
    )
    topk, _ = run_collector(
        examples, features, batches, DecodeConfig(n_best=12, max_answer_length=4), seed, True
    )
    for key, p in exact.items():
        assert topk[key].text == p.text
        assert [c.text for c in topk[key].nbest] == [c.text for c in p.nbest]
        assert topk[key].score == pytest.approx(p.score, abs=1e-5)


def test_topk_shortlist_is_berts_best_starts_times_best_ends() -> None:
    ex = make_example(0, ["a", "b", "c", "d"])
    (f,) = windows(0, ["a", "b", "c", "d"], size=8, overlap=3)
    # tokens: [CLS] q q [SEP] a b c d [SEP]; best starts: a (4), d (1); best ends: b (4), c (2)
    start = torch.tensor([[0.0, 0, 0, 0, 4, -9, -9, 1, 0]])
    end = torch.tensor([[0.0, 0, 0, 0, -9, 4, 2, -9, 0]])
    collector = SpanCollector(DecodeConfig(n_best=2, max_answer_length=30))
    batch = collate([f], [0])
    collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    pred = collector.predictions([ex], [f])["q0"]
    # d (start) pairs with no shortlisted end after it; a pairs with b and c
    assert [(c.text, c.score) for c in pred.nbest] == [("a b", 8.0), ("a b c", 6.0)]


@pytest.mark.parametrize(
    "case", ["distinct", "ties_at_kth", "short_rows", "all_equal"], ids=lambda c: c
)
def test_topk_rows_are_the_k_largest(case: str) -> None:
    # the partition fast path (distinct values) and the fallback (ties at the k-th value,
    # rows with fewer than k finite entries) both return k entries that are a row's k largest
    from structqa.decoding import _topk

    rng = np.random.default_rng(7)
    values = rng.standard_normal((6, 40)).astype(np.float32)
    if case == "ties_at_kth":
        values = np.round(values * 2) / 2  # few distinct values: ties everywhere
    elif case == "short_rows":
        values[:, 5:] = -np.inf  # 5 finite entries per row, k = 8
    elif case == "all_equal":
        values[:] = 1.5
    k = 8
    val, idx = _topk(values, k)
    assert val.shape == idx.shape == (6, k)
    for row in range(6):
        assert len(set(idx[row].tolist())) == k  # k distinct positions
        np.testing.assert_array_equal(val[row], values[row, idx[row]])
        np.testing.assert_array_equal(np.sort(val[row]), np.sort(values[row])[-k:])


def test_candidates_skip_ties_and_short_windows_consistently() -> None:
    # constant logits tie every start and end: decoding still returns the best span found
    # by the exact search's score, and a window shorter than n_best decodes
    ex = make_example(0, ["a", "b", "c", "d"])
    (f,) = windows(0, ["a", "b", "c", "d"], size=8, overlap=3)
    batch = collate([f], [0])
    flat = torch.zeros(1, batch.answer_mask.shape[1])
    got = {}
    for candidates in ("topk", "all"):
        collector = SpanCollector(
            DecodeConfig(n_best=20, max_answer_length=2, candidates=candidates)
        )
        collector.add(HeadOutput(flat, flat), batch.feature_index, batch.answer_mask)
        got[candidates] = collector.predictions([ex], [f])["q0"]
    assert got["topk"].score == got["all"].score == 0.0
    # every span of length <= 2 ties at 0: the same set of texts either way
    assert sorted(c.text for c in got["topk"].nbest) == sorted(c.text for c in got["all"].nbest)


# ---- whole words ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "span", "expected"),
    [
        ("the 1990s band", (4, 8), "1990s"),  # ends inside a word
        ("the 1990s band", (8, 9), "1990s"),  # starts inside one
        ("the 1990s band", (5, 12), "1990s band"),  # both
        ("the 1990s band", (4, 9), "1990s"),  # already whole
        ("cost $5.00 each", (6, 7), "5"),  # a digit beside punctuation is a word's edge
        ("in New York.", (3, 11), "New York"),  # the full stop stays out
        ("COVID-19 cases", (0, 5), "COVID"),  # a hyphen is an edge
        ("word", (0, 0), ""),  # empty stays empty
        ("naïve café", (0, 3), "naïve"),  # letters beyond ASCII
        ("Zu\u0308rich is big", (0, 2), "Zu\u0308rich"),  # a combining mark is in the word
        ("北京是中国的首都。", (0, 2), "北京"),  # each CJK character is a word
        ("id " + "x" * 40 + " end", (3, 6), "xxx"),  # a 40-letter "word": left as cut
        ("a " + "y" * 20 + "z", (2, 5), "y" * 20 + "z"),  # 21 letters: within the limit
    ],
)
def test_word_span_widens_only_cuts_inside_a_word(
    context: str, span: tuple[int, int], expected: str
) -> None:
    s, e = word_span(context, *span)
    assert context[s:e] == expected


def subword_case() -> tuple[Example, Feature]:
    """ "the 1990s band" as WordPiece tokens: the | 1990 | ##s | band."""
    ex = Example("q", "when?", "the 1990s band")
    offsets = np.array(
        [[-1, -1], [-1, -1], [-1, -1], [0, 3], [4, 8], [8, 9], [10, 14], [-1, -1]], dtype=np.int64
    )
    types = np.array([0, 0, 0, 1, 1, 1, 1, 1], dtype=np.int64)
    return ex, Feature(0, np.arange(8, dtype=np.int64), types, offsets)


@pytest.mark.parametrize("whole_words", [False, True])
def test_whole_words_widens_the_answer_and_the_nbest(whole_words: bool) -> None:
    ex, f = subword_case()
    start = torch.tensor([[0.0, 0, 0, 0, 6, 1, 0, 0]])  # "1990" starts best
    end = torch.tensor([[0.0, 0, 0, 0, 6, 5, 2, 0]])  # ... and ends best, "##s" next
    collector = SpanCollector(DecodeConfig(n_best=3, candidates="all", whole_words=whole_words))
    batch = collate([f], [0])
    collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    pred = collector.predictions([ex], [f])["q"]
    texts = [c.text for c in pred.nbest]
    if whole_words:
        assert (pred.text, pred.start_char, pred.end_char) == ("1990s", 4, 9)
        assert texts == ["1990s", "1990s band", "the 1990s"]  # "1990" and "1990s" merged
        # a merged text keeps its best span's share (as texts repeated in a window do)
        top = 1.0 / (1.0 + math.exp(-4.0) + math.exp(-6.0))
        assert pred.nbest[0].probability == pytest.approx(top)
    else:
        assert (pred.text, pred.start_char, pred.end_char) == ("1990", 4, 8)
        assert texts == ["1990", "1990s", "1990s band"]
    assert pred.score == pytest.approx(12.0)  # the span's own score either way


def test_a_span_without_a_letter_or_digit_is_never_an_answer() -> None:
    words = ["Denver", ".", "Broncos", "—", "24–10"]
    ex = make_example(0, words)
    (f,) = windows(0, words, size=8, overlap=3)
    # tokens: [CLS] q q [SEP] Denver . Broncos — 24–10 [SEP]; "." and "—" score best alone
    start = torch.tensor([[0.0, 0, 0, 0, 3, 9, 5, 8, 4, 0]])
    end = torch.zeros_like(start)
    collector = SpanCollector(DecodeConfig(n_best=5, max_answer_length=1, candidates="all"))
    batch = collate([f], [0])
    collector.add(HeadOutput(start, end), batch.feature_index, batch.answer_mask)
    pred = collector.predictions([ex], [f])["q0"]
    assert pred.text == "Broncos"
    assert [c.text for c in pred.nbest] == ["Broncos", "24–10", "Denver"]
