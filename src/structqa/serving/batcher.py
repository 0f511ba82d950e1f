"""Micro-batching: one inference thread scores the windows of many requests together.

A request is featurized off the event loop (:class:`Featurizer`, a small thread pool with a
tokenizer per thread), then handed to the :class:`Batcher` as a :class:`Job`: its examples,
their windows and a future. The worker thread takes windows from the waiting jobs
round-robin (one window per job per turn, the jobs in a ring, up to ``max_batch_windows``),
so a 1 MB context (a thousand windows) shares every forward pass with the short requests
that arrive beside it instead of holding the model for its whole length. Each job's windows
feed its own :class:`~structqa.decoding.SpanCollector`; when all are scored its future gets
the answers, decoded exactly as :meth:`Predictor.predict_batch` decodes them.

The pieces are the Predictor's: ``featurize`` -> ``collate`` -> the model -> collector ->
``predictions``; only the order in which windows meet in a batch differs.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from structqa.cpu import release_openmp_threads
from structqa.data.records import Example
from structqa.decoding import SpanCollector
from structqa.features.batching import collate
from structqa.features.squad import Feature, refuse_long_question
from structqa.heads.base import HeadOutput
from structqa.prediction.predictor import Predictor
from structqa.runtime import autocast

log = logging.getLogger(__name__)


class Featurizer:
    """Tokenizes requests into windows on ``threads`` threads, each with its own copy of the
    tokenizer (a fast tokenizer's truncation settings are state that every call sets, so one
    shared between threads could cut a context with another call's settings)."""

    def __init__(self, predictor: Predictor, threads: int = 2):
        self.predictor = predictor
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="featurize")
        # spaCy annotation (token-tag models only) is not shared between threads
        self._tag_lock = threading.Lock() if predictor.annotator is not None else None

    def _tokenizer(self) -> Any:
        tok = getattr(self._local, "tokenizer", None)
        if tok is None:
            tok = self._local.tokenizer = copy.deepcopy(self.predictor.tokenizer)
        return tok

    def featurize(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[Example], list[Feature]]:
        """The examples of ``pairs`` and their windows (run on a pool thread), by the
        Predictor's one policy for a user's pairs (an over-long question is refused)."""
        if self._tag_lock is None:
            return self.predictor.featurize_pairs(pairs, self._tokenizer())
        with self._tag_lock:
            return self.predictor.featurize_pairs(pairs, self._tokenizer())

    def submit(self, pairs: Sequence[tuple[str, str]]) -> Future:
        return self._pool.submit(self.featurize, pairs)

    def check_question(self, question: str) -> None:
        """:class:`QuestionTooLong` where ``question`` is longer than the model reads
        (``data.max_query_len`` tokens, counted as :meth:`featurize` counts them, which
        would refuse it): run on a pool thread before a search for it."""
        refuse_long_question(question, self._tokenizer(), self.predictor.features.max_query_len)

    def submit_check(self, question: str) -> Future:
        return self._pool.submit(self.check_question, question)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass(eq=False)
class Job:
    """One request's windows on their way through the model."""

    examples: list[Example]
    features: list[Feature]
    collector: SpanCollector
    future: Future = field(default_factory=Future)
    scheduled: int = 0  # windows handed to a batch so far
    scored: int = 0  # windows whose logits reached the collector
    enqueued: float = field(default_factory=time.monotonic)

    @property
    def windows(self) -> int:
        return len(self.features)


@dataclass(frozen=True)
class BatchStats:
    windows: int
    requests: int
    seconds: float
    passes: int = 1  # forward passes (length groups)


#: The fixed cost of one forward pass, in padded tokens' worth of compute: a pass of n windows
#: padded to L tokens is taken to cost PASS_OVERHEAD_TOKENS + n * L when a batch is cut into
#: length groups (a larger value keeps more windows in one padded pass). Measured on the
#: 2-core CPU (quickstart DyREx, bf16, 12 random held-out windows, 12 interleaved repeats,
#: other load ~8): one padded pass 1719 ms; cut with 64: 4.7 passes, 2290 ms; 256: 2.4
#: passes, 1632 ms; 1024: 1.6 passes, 1618 ms; one window per pass: 2327 ms.
PASS_OVERHEAD_TOKENS = 1024
#: The same for an ONNX graph, which has next to no fixed cost per pass to share: int8 on a
#: 2-core AVX512-VNNI Xeon, quickstart DyREx, windows of ~128 tokens: 15.9 ms for one, 16.7
#: ms a window in a pass of 16; 16 random held-out windows (81-322 tokens) in one padded pass
#: 912 ms, one by one 377 ms. With 1024, the batched server served 0.72x the requests of one
#: request at a time at 16 clients (p99 1.40-1.48 s); with 32, 1.12x (p99 0.87-1.03 s against
#: 0.77-0.94 s). Each pass then holds windows of one padded length (the shape multiple) or
#: nearly.
GRAPH_PASS_OVERHEAD_TOKENS = 32


#: A server pads every forward pass's windows to a multiple of this many tokens. Each new
#: (windows, tokens) shape costs memory that stays: oneDNN's compiled kernels and the
#: allocator's pools for it. A server meets thousands of shapes, and its RSS grew without
#: end, +826 MB from minute 1 to minute 5 of a soak at 16 clients. With passes padded to a
#: multiple of 32, 800 random passes in one process held at 810-850 MB from pass 200 on,
#: against 1460 MB after 400 passes and still growing unpadded. The cost is about 16 more
#: tokens per pass.
SHAPE_MULTIPLE = 32


def length_groups(
    lengths: Sequence[int], overhead: int = PASS_OVERHEAD_TOKENS
) -> list[tuple[int, int]]:
    """Cut windows sorted longest first into contiguous groups [lo, hi), one forward pass each,
    minimising the sum over groups of ``overhead + size * longest`` (exact: dynamic
    programming over the cut points, O(n^2) for the <= max_batch_windows windows)."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest cut of the first j windows
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # the last group is [i, j); its longest window is lengths[i]
            cost = best[i] + overhead + (j - i) * lengths[i]
            if cost < best[j]:
                best[j], start[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append((start[j], j))
        j = start[j]
    return groups[::-1]


class Batcher:
    """The one inference worker: a thread that drains a ring of jobs in micro-batches.

    ``max_batch_windows`` caps the windows of one forward pass; ``max_wait_ms`` is how long an
    idle worker waits for more windows before running a batch that is not full;
    ``on_batch`` is called after each forward (metrics)."""

    def __init__(
        self,
        predictor: Predictor,
        max_batch_windows: int = 16,
        max_wait_ms: float = 2.0,
        on_batch: Callable[[BatchStats], None] | None = None,
    ):
        if max_batch_windows < 1:
            raise ValueError(f"max_batch_windows must be at least 1, not {max_batch_windows}")
        self.predictor = predictor
        self.max_batch_windows = max_batch_windows
        self.max_wait = max_wait_ms / 1000
        self.on_batch = on_batch
        # a model that packs its windows pays nothing for padding: each batch is one pass
        self.one_pass = predictor.packs_windows
        self.pass_overhead = (
            PASS_OVERHEAD_TOKENS
            if predictor.runtime.startswith("torch")
            else GRAPH_PASS_OVERHEAD_TOKENS
        )
        self._ring: deque[Job] = deque()  # jobs with windows not yet scheduled
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._pending_windows = 0
        self._cond = threading.Condition()
        self._stop = False
        # the model was loaded on the calling thread, whose OpenMP team would otherwise stay
        # beside the inference thread's and halve its speed (see release_openmp_threads)
        release_openmp_threads()
        self._thread = threading.Thread(target=self._run, name="inference", daemon=True)
        self._thread.start()

    # ---- called from other threads (the event loop's) --------------------------------------

    def submit(self, examples: list[Example], features: list[Feature]) -> Job:
        """Queue a request's windows; its future resolves to one Answer per example."""
        job = Job(examples, features, SpanCollector(self.predictor.decode))
        if not features:  # (featurize makes at least one window per example)
            job.future.set_result([])
            return job
        with self._cond:
            self._ring.append(job)
            self._pending_windows += job.windows
            self._cond.notify()
        return job

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the inference thread between batches (e.g. an attention map, whose
        forward hooks must not see another request's forward)."""
        fut: Future = Future()
        with self._cond:
            self._calls.append((fn, fut))
            self._cond.notify()
        return fut

    @property
    def pending_windows(self) -> int:
        return self._pending_windows

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)

    # ---- the inference thread --------------------------------------------------------------

    def _run(self) -> None:
        called = False  # the last turn ran a call: batches waiting go next
        while True:
            with self._cond:
                while not (self._ring or self._calls or self._stop):
                    self._cond.wait()
                if self._stop:
                    break
                # calls and batches take turns: clients that always keep an attention map
                # queued (seconds each) once kept every answer from the model until it timed out
                take_call = bool(self._calls) and not (called and self._ring)
                call = self._calls.popleft() if take_call else None
                if call is None:
                    self._wait_for_more()
                    picked = self._pick()
            called = call is not None
            if call is not None:
                self._run_call(*call)
            elif picked:
                self._score(picked)
        for job in self._ring:
            job.future.cancel()

    def _wait_for_more(self) -> None:
        """With fewer windows than a full batch, wait up to max_wait after the oldest job
        arrived (the lock is released while waiting)."""
        if not self.max_wait:
            return
        deadline = self._ring[0].enqueued + self.max_wait
        while self._pending_windows < self.max_batch_windows and not self._stop:
            left = deadline - time.monotonic()
            if left <= 0 or not self._cond.wait(left):
                break

    def _pick(self) -> list[tuple[Job, int]]:
        """Up to max_batch_windows (job, window) pairs, one per job per turn of the ring, and
        at most a fair share per job (max_batch_windows / waiting jobs, rounded up): a 1 MB
        passage beside eight short requests adds two windows to their batch, not the eight
        that would fill it. A job with windows left goes to the back of the ring. Jobs whose
        caller gave up are dropped."""
        picked: list[tuple[Job, int]] = []
        share = -(-self.max_batch_windows // max(1, len(self._ring)))
        taken: dict[Job, int] = {}
        held: list[Job] = []  # at their share: back in the ring after this batch
        while self._ring and len(picked) < self.max_batch_windows:
            job = self._ring.popleft()
            if job.future.cancelled():
                self._pending_windows -= job.windows - job.scheduled
                continue
            picked.append((job, job.scheduled))
            job.scheduled += 1
            self._pending_windows -= 1
            taken[job] = taken.get(job, 0) + 1
            if job.scheduled < job.windows:
                (self._ring if taken[job] < share else held).append(job)
        self._ring.extend(held)
        return picked

    def _run_call(self, fn: Callable[[], Any], fut: Future) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except Exception as e:  # the caller turns it into its own reply
            fut.set_exception(e)

    def _score(self, picked: list[tuple[Job, int]]) -> None:
        """Score the picked windows in one forward pass where the model packs them (torch on
        the CPU: no padded position is computed), else sorted by length and cut into groups
        of similar length, one forward pass each (collate pads a pass to its longest window:
        a 384-token window beside 100-token ones would triple their cost)."""
        t0 = time.perf_counter()
        picked.sort(key=lambda p: -len(p[0].features[p[1]]))
        jobs = list(dict.fromkeys(job for job, _ in picked))
        if self.one_pass:
            groups = [(0, len(picked))]
        else:
            m = self.predictor.pad_to_multiple  # a pass is padded to it: cost what it pads to
            lengths = [-(-len(job.features[w]) // m) * m for job, w in picked]
            groups = length_groups(lengths, self.pass_overhead)
        try:
            for lo, hi in groups:
                part = picked[lo:hi]
                out, answer_mask = self._forward([job.features[w] for job, w in part])
                for job in dict.fromkeys(job for job, _ in part):
                    rows = [r for r, (j, _) in enumerate(part) if j is job]
                    windows = torch.tensor([part[r][1] for r in rows])
                    job.collector.add(_rows(out, rows), windows, answer_mask[rows])
                    job.scored += len(rows)
                    if job.scored == job.windows:
                        self._finish(job)
        except Exception as e:
            log.exception("inference failed on a batch of %d windows", len(picked))
            for job in jobs:
                if not job.future.done():
                    self._fail(job, e)
        if self.on_batch is not None:
            stats = BatchStats(len(picked), len(jobs), time.perf_counter() - t0, len(groups))
            self.on_batch(stats)

    @torch.inference_mode()
    def _forward(self, features: list[Feature]) -> tuple[HeadOutput, torch.Tensor]:
        p = self.predictor
        batch = collate(features, range(len(features)), pad_to_multiple=p.pad_to_multiple)
        batch = batch.to(p.device)
        with autocast(p.device, p.bf16):
            out = p.model(batch)
        return out, batch.answer_mask

    def _finish(self, job: Job) -> None:
        try:
            # the Predictor's own last step: verifier, null threshold, probability, n-best
            preds = job.collector.predictions(job.examples, job.features)
            answers = self.predictor.answers(job.examples, preds)
        except Exception as e:
            log.exception("decoding failed for a request of %d windows", job.windows)
            self._fail(job, e)
            return
        try:
            job.future.set_result(answers)
        except InvalidStateError:  # the caller gave up (deadline) while it was scored
            pass

    def _fail(self, job: Job, error: Exception) -> None:
        with self._cond:
            if job in self._ring:
                self._ring.remove(job)
                self._pending_windows -= job.windows - job.scheduled
        try:
            job.future.set_exception(error)
        except InvalidStateError:
            pass


def _rows(out: HeadOutput, rows: list[int]) -> HeadOutput:
    """The head output of some rows of a batch: every per-window tensor (first dimension the
    batch's) cut to those rows, whatever fields a head fills (the answerability classifier's
    ``null_odds`` was once left whole, so a request read another request's no-answer odds);
    no loss, no attention maps."""
    batch = out.start_logits.shape[0]
    idx = torch.tensor(rows, device=out.start_logits.device)
    pick = {
        f.name: value.index_select(0, idx)
        for f in fields(out)
        if isinstance(value := getattr(out, f.name), torch.Tensor)
        and value.dim() > 0
        and value.shape[0] == batch
    }
    return replace(out, **pick | {"loss": None, "attentions": ()})
