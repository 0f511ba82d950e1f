"""What the start and end queries look at, for one question (paper, Sec. 6.2 and Figure 3).

One map per query over the tokens of the window that holds the predicted answer:

- DyReF: the encoder's self-attention probabilities, stacked over every attention sub-layer
  and head and reduced by an element-wise max (the paper's "2D max pooling over the head and
  layer dimensions"); the start and end query rows (prefix positions 0 and 1) over the
  2 + N sequence are kept, split into query -> query (2 x 2) and query -> token (2 x N).
- DyREx: the cross-attention probabilities of the K decoder layers (queries attending to the
  token states), max over layers and heads; the queries' self-attention gives the 2 x 2 map.
  The head does not return its weights, so its layers are run again here, block by block with
  ``need_weights=True``, on the exact input the head saw (captured with a forward hook).
- Static queries (``independent``, ``joint``): no query attention exists. The maps are the
  start and end probability distributions over the window instead: softmax of the start and
  end logits, or, for a joint scorer, the start and end marginals of its span softmax.

Max-pooled maps are not distributions: each weight lies in [0, 1], a row need not sum to 1.

Dimension letters: W windows, Y attention sub-layers, H heads, P = 2 queries, N tokens, L max
answer length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from structqa.attention.masks import materialize
from structqa.attention.query_masks import NUM_QUERIES
from structqa.data.records import Example
from structqa.features.batching import Batch, collate
from structqa.features.squad import Feature, featurize
from structqa.heads.base import HeadOutput, QueryHead, QuerySource, QueryStates
from structqa.heads.dyref import DyReFQueries
from structqa.heads.dyrex import DyRExQueries
from structqa.heads.independent import StaticQueries
from structqa.models.extractive import ExtractiveQAModel
from structqa.runtime import autocast

QUESTION, CONTEXT, SPECIAL = "question", "context", "special"


@dataclass(frozen=True)
class QueryAttention:
    """The start/end query maps of one question over the window holding its answer."""

    question: str
    context: str
    tokens: list[str]  # the window's N tokens: [CLS] question [SEP] passage [SEP]
    segments: list[str]  # per token: "special" | "question" | "context"
    offsets: np.ndarray  # (N, 2) int64 char span in the context; (-1, -1) outside the passage
    start_weights: np.ndarray  # (N,) float32, what q_s looks at
    end_weights: np.ndarray  # (N,) float32, what q_e looks at
    query_weights: np.ndarray | None  # (2, 2) rows q_s, q_e -> columns q_s, q_e; None if static
    answer: str  # the best span's text ('' when the window has no valid span)
    answer_chars: tuple[int, int]  # [start, end) in the context; (-1, -1) without a span
    answer_tokens: tuple[int, int]  # inclusive token positions in the window; (-1, -1)
    score: float  # the span's score (start + end logits, or the joint span score)
    null_odds: float  # no-answer score minus the span's score, in this window
    head: str  # the model's head name (config.model.head)
    kind: str  # "dyref" | "dyrex" | "static": which map this is
    aggregation: str  # how the weights were computed, in words
    window: int  # index of the shown window among the example's windows
    num_windows: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (lists and numbers)."""
        return {
            "question": self.question,
            "context": self.context,
            "head": self.head,
            "kind": self.kind,
            "aggregation": self.aggregation,
            "answer": self.answer,
            "answer_chars": list(self.answer_chars),
            "answer_tokens": list(self.answer_tokens),
            "score": self.score,
            "null_odds": self.null_odds,
            "window": self.window,
            "num_windows": self.num_windows,
            "tokens": self.tokens,
            "segments": self.segments,
            "offsets": self.offsets.tolist(),
            "start_weights": self.start_weights.tolist(),
            "end_weights": self.end_weights.tolist(),
            "query_weights": None if self.query_weights is None else self.query_weights.tolist(),
        }


@dataclass(frozen=True)
class QueryMaps:
    """What a map maker returns: weights over the window's N tokens (and the 2 x 2)."""

    start: Tensor  # (N,)
    end: Tensor  # (N,)
    queries: Tensor | None  # (2, 2)
    aggregation: str


@dataclass(frozen=True)
class DyRExTrace:
    """DyREx's queries recomputed block by block, with every attention weight."""

    queries: Tensor  # (B, 2, D), equal to the head's own forward
    self_weights: Tensor  # (K, B, H, 2, 2): the queries attending to each other
    cross_weights: Tensor  # (K, B, H, 2, N): the queries attending to the token states


def dyrex_trace(source: DyRExQueries, hidden: Tensor, batch: Batch) -> DyRExTrace:
    """Run :class:`DyRExQueries`' own blocks as its forward does, asking each for its weights.

    hidden: (B, N, D) token states (the head's input). The masks are built as in
    ``DyRExQueries.forward``; a test checks the queries match the head's to 1e-5.
    """
    b = hidden.shape[0]
    q = source.q0.expand(b, -1, -1)  # (B, 2, D)
    pair = materialize(source.pair_mask, 1, 1, NUM_QUERIES, NUM_QUERIES, hidden.device)
    keys = batch.attention_mask.bool()[:, None, None, :]  # (B, 1, 1, N)
    selfs, crosses = [], []
    for layer in source.layers:
        q, weights = layer(q, pair, memory=hidden, memory_mask=keys, need_weights=True)
        kinds = [k for k in layer.spec if k != "ffn"]  # one weight tensor per attention kind
        by_kind = dict(zip(kinds, weights, strict=True))
        selfs.append(by_kind["sa"])  # (B, H, 2, 2)
        crosses.append(by_kind["xa"])  # (B, H, 2, N)
    return DyRExTrace(q, torch.stack(selfs), torch.stack(crosses))


# ---- one map maker per query source ------------------------------------------------------


@dataclass
class _Run:
    """One window's forward pass: the head output, the encoder's attentions, and what the
    query source received and returned (captured by a hook)."""

    output: HeadOutput
    hidden: Tensor  # (1, N, D) the query source's input
    batch: Batch
    states: QueryStates
    bf16: bool


def _dyref_maps(source: QuerySource, run: _Run) -> QueryMaps:
    att = torch.stack([a.float() for a in run.output.attentions])  # (Y, 1, H, P+N, P+N)
    y, _, h = att.shape[:3]
    pooled = att.amax(dim=(0, 2))[0]  # (P+N, P+N): the paper's 2D max pooling
    rows = pooled[:NUM_QUERIES]  # (2, P+N): q_s, q_e attending to queries and tokens
    n = rows.shape[1] - NUM_QUERIES
    mask = getattr(source, "query_mask", "?")
    text = (
        f"DyReF: element-wise max over the encoder's {y} self-attention sub-layers x {h} heads "
        f"(2D max pooling, paper Sec. 6.2) of the start-query and end-query rows (prefix "
        f"positions 0 and 1) over the 2 + {n} sequence; query->query weights are the first two "
        f"columns, query->token weights the other {n}. Query mask: {mask}. Each weight is a "
        "maximum of attention probabilities, in [0, 1]; rows do not sum to 1."
    )
    return QueryMaps(rows[0, NUM_QUERIES:], rows[1, NUM_QUERIES:], rows[:, :NUM_QUERIES], text)


def _dyrex_maps(source: QuerySource, run: _Run) -> QueryMaps:
    assert isinstance(source, DyRExQueries)
    trace = dyrex_trace(source, run.hidden, run.batch)
    # the weights path (explicit softmax) and the head's (SDPA) differ only by rounding; a
    # larger gap means DyRExQueries.forward no longer does what dyrex_trace repeats
    gap = (trace.queries.float() - run.states.queries.float()).abs().max().item()
    if gap > (0.1 if run.bf16 else 1e-4):
        raise RuntimeError(
            f"DyREx recomputation differs from the head's forward by {gap:.2e}: "
            "structqa.heads.dyrex changed; update structqa.analysis.attention_maps"
        )
    k, _, h = trace.cross_weights.shape[:3]
    cross = trace.cross_weights.float().amax(dim=(0, 2))[0]  # (2, N)
    pair = trace.self_weights.float().amax(dim=(0, 2))[0]  # (2, 2)
    text = (
        f"DyREx: element-wise max over its {k} decoder layers x {h} heads of the "
        f"cross-attention probabilities of the start and end queries over the {cross.shape[1]} "
        "token states (recomputed block by block with need_weights=True); query->query "
        f"weights: the same max over the queries' self-attention. Query mask: "
        f"{source.query_mask}. Each weight is a maximum of attention probabilities, in [0, 1]; "
        "rows do not sum to 1."
    )
    return QueryMaps(cross[0], cross[1], pair, text)


def _static_maps(source: QuerySource, run: _Run) -> QueryMaps:
    out = run.output
    if out.span_scores is not None and out.null_scores is not None:
        start, end = span_marginals(out.span_scores[0], out.null_scores[0])
        what = (
            "the start and end marginals of the joint span softmax over the window (the "
            "no-answer span's probability sits on [CLS])"
        )
    else:
        start = out.start_logits[0].double().softmax(-1)
        end = out.end_logits[0].double().softmax(-1)
        what = (
            "the start and end probability distributions: softmax of the start and end logits "
            "over the window (tokens outside the passage, except [CLS], are masked to ~0)"
        )
    text = (
        "Static queries: the start and end queries are fixed vectors that attend to nothing, "
        f"so no query attention exists. Shown instead: {what}. Each row sums to 1."
    )
    return QueryMaps(start, end, None, text)


def span_marginals(spans: Tensor, null: Tensor) -> tuple[Tensor, Tensor]:
    """p(start = i) and p(end = j) under the softmax over the (N, L) band of span scores
    (span (i, i + l)) and the no-answer score, which is credited to position 0 ([CLS])."""
    n, L = spans.shape
    flat = torch.cat([spans.double().reshape(-1), null.double().reshape(1)])
    p = flat.softmax(-1)
    band, p_null = p[:-1].reshape(n, L), p[-1]
    start = band.sum(1)
    ends = torch.arange(n, device=spans.device)[:, None] + torch.arange(L, device=spans.device)
    inside = ends < n  # past-the-end spans have score NEG: probability ~0, dropped
    end = torch.zeros(n, dtype=p.dtype, device=p.device).index_add_(0, ends[inside], band[inside])
    start[0] += p_null
    end[0] += p_null
    return start, end


MAP_MAKERS: dict[type[QuerySource], tuple[str, Callable[[QuerySource, _Run], QueryMaps]]] = {
    DyReFQueries: ("dyref", _dyref_maps),
    DyRExQueries: ("dyrex", _dyrex_maps),
    StaticQueries: ("static", _static_maps),
}


def _query_source(model: ExtractiveQAModel) -> tuple[QuerySource, str, Callable]:
    head = model.head
    source = head.queries if isinstance(head, QueryHead) else None
    for cls, (kind, maker) in MAP_MAKERS.items():
        if isinstance(source, cls):
            return source, kind, maker
    raise ValueError(
        f"explain: no attention map for head {type(head).__name__} "
        f"(query source {type(source).__name__}); known: "
        + ", ".join(c.__name__ for c in MAP_MAKERS)
    )


# ---- the entry point ---------------------------------------------------------------------


@dataclass
class _Setup:
    """What the Predictor would window and decode with (built here, not imported from the
    service above this layer): window sizes, token tags, decoding, device and bf16."""

    features: Any
    annotator: Any
    decode: Any
    device: torch.device
    bf16: bool

    @classmethod
    def of(cls, model: ExtractiveQAModel, config: Any, bf16: str, annotator: Any = None) -> _Setup:
        from structqa.decoding import DecodeConfig
        from structqa.features.squad import tag_annotator
        from structqa.runtime import use_bf16
        from structqa.training.data import feature_config

        device = next(model.parameters()).device
        features = feature_config(config)
        return cls(
            features,
            annotator if annotator is not None else tag_annotator(features, answering=True),
            DecodeConfig.from_settings(config.decode),
            device,
            use_bf16(bf16, device),
        )


def _decode(predictor: Any, out: HeadOutput, batch: Batch, example: Example, features) -> Any:
    """The window's best span, decoded exactly as the Predictor decodes (one example)."""
    from structqa.decoding import SpanCollector

    collector = SpanCollector(predictor.decode)
    collector.add(out, batch.feature_index, batch.answer_mask)
    return collector.predictions([example], features)[example.id]


def _forward(
    model: ExtractiveQAModel, source: QuerySource, batch: Batch, bf16: bool, attentions: bool
) -> _Run:
    captured: dict[str, Any] = {}

    def hook(module: Any, args: tuple[Any, ...], output: QueryStates) -> None:
        captured["hidden"], captured["batch"], captured["states"] = args[0], args[1], output

    handle = source.register_forward_hook(hook)
    try:
        with autocast(batch.input_ids.device, bf16):
            out = model(batch, output_attentions=attentions)
    finally:
        handle.remove()
    return _Run(out, captured["hidden"], captured["batch"], captured["states"], bf16)


def _token_span(offsets: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Inclusive token positions of the passage tokens overlapping chars [start, end)."""
    if start < 0:
        return -1, -1
    hit = np.nonzero((offsets[:, 0] >= 0) & (offsets[:, 0] < end) & (offsets[:, 1] > start))[0]
    return (int(hit[0]), int(hit[-1])) if len(hit) else (-1, -1)


def _segments(feature: Feature, special_ids: set[int]) -> list[str]:
    return [
        CONTEXT if off >= 0 else SPECIAL if int(tok) in special_ids else QUESTION
        for tok, off in zip(feature.input_ids, feature.offsets[:, 0], strict=True)
    ]


@torch.inference_mode()
def explain(
    model: ExtractiveQAModel,
    tokenizer: Any,
    config: Any,
    question: str,
    context: str,
    bf16: str = "off",
    whole_words: bool | None = None,
    annotator: Any = None,
) -> QueryAttention:
    """Answer ``question`` about ``context`` and return what the start/end queries looked at.

    ``config`` is the checkpoint's :class:`structqa.config.Config` (its window sizes and
    decoding settings are used, as by the Predictor). A context longer than one window is
    split as for prediction; the map is of the window holding the best span. ``bf16``:
    auto | on | off (default off: maps in float32). ``whole_words`` (default: the config's
    ``decode.whole_words``) widens an answer that starts or ends inside a word to the word,
    as ``structqa predict --whole-words`` does; the maps themselves do not change.
    ``annotator``: the token tagger to reuse (a service's Predictor's: spaCy loaded once),
    else one is made for a model that reads token tags.
    """
    if not question.strip() or not context.strip():
        raise ValueError("explain: question and context must be non-empty")
    source, kind, maker = _query_source(model)
    was_training = model.training
    model.eval()
    predictor = _Setup.of(model, config, bf16, annotator)
    if whole_words is not None:  # (the caller's config is left as it is)
        predictor.decode = replace(predictor.decode, whole_words=whole_words)
    try:
        example = Example(id="explain", question=question, context=context)
        features, _ = featurize(  # a user's question: refused when too long, never cut
            [example],
            tokenizer,
            predictor.features,
            annotator=predictor.annotator,
            cut_long_questions=False,
        )
        # the best window: each window decoded on its own, the highest-scoring span wins
        # (the Predictor's merge keeps the same span: the best over all windows)
        best, best_score = 0, -float("inf")
        for w in range(len(features)):
            batch = collate(features, [w]).to(predictor.device)
            run = _forward(model, source, batch, predictor.bf16, attentions=False)
            score = _decode(predictor, run.output, batch, example, features).score
            if score > best_score:
                best, best_score = w, score
        batch = collate(features, [best]).to(predictor.device)
        run = _forward(model, source, batch, predictor.bf16, attentions=kind == "dyref")
        pred = _decode(predictor, run.output, batch, example, features)
        with autocast(batch.input_ids.device, predictor.bf16):
            maps = maker(source, run)
    finally:
        model.train(was_training)
    feature = features[best]
    start_char = pred.start_char if pred.text else -1
    end_char = pred.end_char if pred.text else -1
    return QueryAttention(
        question=question,
        context=context,
        tokens=tokenizer.convert_ids_to_tokens(feature.input_ids.tolist()),
        segments=_segments(feature, set(tokenizer.all_special_ids)),
        offsets=feature.offsets.copy(),
        start_weights=maps.start.float().cpu().numpy(),
        end_weights=maps.end.float().cpu().numpy(),
        query_weights=None if maps.queries is None else maps.queries.float().cpu().numpy(),
        answer=pred.text,
        answer_chars=(start_char, end_char),
        answer_tokens=_token_span(feature.offsets, start_char, end_char),
        score=float(pred.score),
        null_odds=float(pred.null_odds),
        head=str(config.model.head),
        kind=kind,
        aggregation=maps.aggregation,
        window=best,
        num_windows=len(features),
    )
