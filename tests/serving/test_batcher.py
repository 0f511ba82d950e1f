"""The micro-batcher answers as the Predictor does, whatever windows share a forward pass, and
schedules windows round-robin across requests."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch
from serving_support import CONTEXT

from structqa.prediction.predictor import Predictor
from structqa.serving.batcher import (
    SHAPE_MULTIPLE,
    Batcher,
    BatchStats,
    Featurizer,
    length_groups,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see tests/conftest.py

LONG = " ".join([CONTEXT] * 12)  # many windows of the small-window predictor below


@pytest.fixture(scope="module")
def small_windows(tiny_predictor: Predictor) -> Predictor:
    """The tiny model with 48-token windows: a context of a few sentences spans many."""
    p = Predictor(tiny_predictor.model, tiny_predictor.tokenizer, tiny_predictor.config)
    p.features = replace(p.features, max_seq_len=48, doc_stride=16, max_query_len=16)
    return p


def _run(predictor: Predictor, batcher: Batcher, pairs: list[tuple[str, str]]):
    examples, features = Featurizer(predictor, 1).featurize(pairs)
    return examples, features, batcher.submit(examples, features)


def test_answers_equal_the_predictors(small_windows):
    pairs = [("Who won?", LONG), ("Who lost?", CONTEXT), ("Who played?", LONG[:300])]
    stats: list[BatchStats] = []
    batcher = Batcher(small_windows, max_batch_windows=4, max_wait_ms=0, on_batch=stats.append)
    try:
        jobs = [_run(small_windows, batcher, [pair])[2] for pair in pairs]
        got = [job.future.result(60)[0] for job in jobs]
    finally:
        batcher.close()
    assert sum(job.windows for job in jobs) > 10  # the long contexts really are split
    assert max(s.windows for s in stats) <= 4
    for answer, expected in zip(got, small_windows.predict_batch(pairs), strict=True):
        assert (answer.text, answer.start, answer.end) == (
            expected.text,
            expected.start,
            expected.end,
        )
        assert answer.score == pytest.approx(expected.score, abs=1e-4)
        # (the tail of the n-best can swap near-tied spans: padding differs by the float noise)
        assert [c.text for c in answer.nbest[:5]] == [c.text for c in expected.nbest[:5]]


def test_padding_passes_to_a_multiple_changes_no_answer(small_windows):
    pairs = [("Who won?", LONG), ("Who lost?", CONTEXT)]
    plain = small_windows.predict_batch(pairs)
    padded = Predictor(small_windows.model, small_windows.tokenizer, small_windows.config)
    padded.features, padded.pad_to_multiple = small_windows.features, SHAPE_MULTIPLE
    batcher = Batcher(padded, max_batch_windows=4, max_wait_ms=0)
    try:
        jobs = [_run(padded, batcher, [pair])[2] for pair in pairs]
        got = [job.future.result(60)[0] for job in jobs]
    finally:
        batcher.close()
    for answers in (got, padded.predict_batch(pairs)):
        for answer, expected in zip(answers, plain, strict=True):
            assert (answer.text, answer.start, answer.end) == (
                expected.text,
                expected.start,
                expected.end,
            )
            assert answer.score == pytest.approx(expected.score, abs=1e-4)


def test_a_long_request_shares_batches_with_short_ones(small_windows):
    """Windows are taken one per request per turn: short requests queued behind a long one
    are answered in the first batch, not after all of the long one's windows."""
    stats: list[BatchStats] = []
    batcher = Batcher(small_windows, max_batch_windows=4, max_wait_ms=0, on_batch=stats.append)
    release = threading.Event()
    batcher.call(lambda: release.wait(30))  # hold the worker while the queue fills
    done: list[str] = []
    try:
        jobs = {}
        for name, context in [("long", LONG), ("a", CONTEXT), ("b", CONTEXT), ("c", CONTEXT)]:
            jobs[name] = _run(small_windows, batcher, [("Who won?", context)])[2]
            jobs[name].future.add_done_callback(lambda _, n=name: done.append(n))
        release.set()
        for job in jobs.values():
            job.future.result(60)
    finally:
        batcher.close()
    assert jobs["long"].windows > 8
    assert (stats[0].windows, stats[0].requests) == (4, 4)  # one window of each request
    assert done[-1] == "long" and set(done[:3]) == {"a", "b", "c"}
    assert sum(s.windows for s in stats) == sum(j.windows for j in jobs.values())


def test_calls_and_batches_take_turns(small_windows):
    """Calls (attention maps: seconds each) ran before any batch: clients that always kept one
    queued kept every answer from the model until it timed out."""
    order: list[str] = []
    batcher = Batcher(small_windows, max_batch_windows=16, max_wait_ms=0)
    release = threading.Event()
    batcher.call(lambda: release.wait(30))  # hold the worker while the queue fills
    try:
        job = _run(small_windows, batcher, [("Who won?", CONTEXT)])[2]
        job.future.add_done_callback(lambda _: order.append("answer"))
        calls = [batcher.call(lambda i=i: order.append(f"call {i}")) for i in range(3)]
        release.set()
        job.future.result(60)
        for call in calls:
            call.result(60)
    finally:
        batcher.close()
    assert order == ["answer", "call 0", "call 1", "call 2"]


def test_an_abandoned_request_is_dropped(small_windows):
    stats: list[BatchStats] = []
    batcher = Batcher(small_windows, max_batch_windows=4, max_wait_ms=0, on_batch=stats.append)
    release = threading.Event()
    batcher.call(lambda: release.wait(30))
    try:
        gone = _run(small_windows, batcher, [("Who won?", LONG)])[2]
        kept = _run(small_windows, batcher, [("Who won?", CONTEXT)])[2]
        assert gone.future.cancel()  # what a deadline does (asyncio.wait_for cancels it)
        release.set()
        assert kept.future.result(60)[0].text
    finally:
        batcher.close()
    assert sum(s.windows for s in stats) == kept.windows
    assert batcher.pending_windows == 0


def test_featurizer_threads_agree_with_one_thread(small_windows):
    pairs = [("Who won?", LONG), ("Who lost?", CONTEXT)] * 4
    one = Featurizer(small_windows, 1).featurize(pairs)[1]
    pool = Featurizer(small_windows, 3)
    try:
        futures = [pool.submit(pairs) for _ in range(6)]
        for fut in futures:
            many = fut.result(60)[1]
            assert [f.input_ids.tolist() for f in many] == [f.input_ids.tolist() for f in one]
    finally:
        pool.close()


def test_a_long_request_takes_only_its_share_of_a_batch(small_windows):
    """Beside one short request, a long one adds max_batch_windows / 2 windows (its share), not
    the three that would fill the batch."""
    stats: list[BatchStats] = []
    batcher = Batcher(small_windows, max_batch_windows=4, max_wait_ms=0, on_batch=stats.append)
    release = threading.Event()
    batcher.call(lambda: release.wait(30))
    try:
        long = _run(small_windows, batcher, [("Who won?", LONG)])[2]
        short = _run(small_windows, batcher, [("Who won?", "The Denver Broncos won.")])[2]
        assert short.windows == 1
        release.set()
        short.future.result(60)
        long.future.result(60)
    finally:
        batcher.close()
    assert (stats[0].windows, stats[0].requests) == (3, 2), stats
    assert all(s.windows == 4 for s in stats[1:-1])  # alone, the long request fills batches


def test_length_groups_minimise_padded_cost():
    # one pass: 50 + 4 * 100 = 450; [100, 100] + [10, 10]: 50 + 200 + 50 + 20 = 320;
    # three passes: 370
    assert length_groups([100, 100, 10, 10], overhead=50) == [(0, 2), (2, 4)]
    assert length_groups([100, 100, 10, 10], overhead=1000) == [(0, 4)]
    assert length_groups([100, 90, 80], overhead=0) == [(0, 1), (1, 2), (2, 3)]
    assert length_groups([]) == []


def test_a_packing_model_scores_each_batch_in_one_pass_with_the_same_answers(
    small_windows, monkeypatch
):
    assert small_windows.packs_windows  # torch on the CPU, plain blocks: the encoder packs
    pairs = [("Who won?", LONG), ("Who lost?", CONTEXT), ("Who played?", LONG[:200])]
    runs: dict[bool, tuple[list[BatchStats], list]] = {}
    for packs in (True, False):
        monkeypatch.setattr(Predictor, "packs_windows", property(lambda self, p=packs: p))
        stats: list[BatchStats] = []
        batcher = Batcher(small_windows, max_batch_windows=8, max_wait_ms=50, on_batch=stats.append)
        try:
            jobs = [_run(small_windows, batcher, [pair])[2] for pair in pairs]
            runs[packs] = (stats, [job.future.result(60)[0] for job in jobs])
        finally:
            batcher.close()
    assert all(s.passes == 1 for s in runs[True][0])
    assert sum(s.windows for s in runs[True][0]) > len(runs[True][0])  # passes shared windows
    for a, b in zip(runs[True][1], runs[False][1], strict=True):
        assert (a.text, a.start, a.end) == (b.text, b.start, b.end)
        assert a.score == pytest.approx(b.score, abs=1e-4)


class _WithOdds(torch.nn.Module):
    """The tiny model with an answerability classifier's per-window no-answer odds, as a
    two-stage head outputs them: here a function of the question's first tokens, the same in
    every window of a request and different between these requests."""

    def __init__(self, inner: torch.nn.Module, sep: int) -> None:
        super().__init__()
        self.inner, self.sep = inner, sep

    def forward(self, batch):
        out = self.inner(batch)
        question_length = (batch.input_ids == self.sep).int().argmax(1)  # the first [SEP]
        return replace(out, null_odds=question_length.float() - 5)


def test_each_request_reads_its_own_windows_no_answer_odds(small_windows):
    """Sharing a pass, a request read the first rows of the whole batch's null odds."""
    tokenizer = small_windows.tokenizer
    model = _WithOdds(small_windows.model, tokenizer.sep_token_id)
    p = Predictor(model, tokenizer, small_windows.config, 0.0)
    p.features = small_windows.features
    pairs = [("Who won?", LONG), ("Who lost the game?", CONTEXT), ("Who won it?", LONG[:300])]
    stats: list[BatchStats] = []
    batcher = Batcher(p, max_batch_windows=64, max_wait_ms=0, on_batch=stats.append)
    release = threading.Event()
    batcher.call(lambda: release.wait(30))  # hold the worker while the queue fills
    try:
        jobs = [_run(p, batcher, [pair])[2] for pair in pairs]
        release.set()
        got = [job.future.result(60)[0] for job in jobs]
    finally:
        batcher.close()
    assert stats[0].requests == 3  # the three shared a pass
    expected = p.predict_batch(pairs)
    assert len({a.null_odds for a in expected}) == 3  # the requests' odds differ
    for answer, want in zip(got, expected, strict=True):
        assert answer.null_odds == pytest.approx(want.null_odds, abs=1e-5)
        assert answer.no_answer == want.no_answer
