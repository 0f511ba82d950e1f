"""Span heads behind one interface, built by name from a small registry.

A head is a query source x a scorer (see :mod:`structqa.heads.base`):

=================  ===================  ==================
name               query source         scorer
=================  ===================  ==================
``independent``    static (BERT)        independent
``joint``          static               joint
``dyrex``          DyREx                independent
``dyref``          DyReF                independent
``dyrex+joint``    DyREx                joint
``dyref+joint``    DyReF                joint
=================  ===================  ==================

The paper's "static" variant (Table 3, a) is the ``independent`` head. Options, all keywords
(each head ignores those it does not use, since the config passes every option):

- ``query_mask``: attention between the queries. DyREx: ``bidirectional`` | ``causal`` |
  ``independent``; DyReF also ``full`` (tokens see the queries too).
- ``dyrex_layers``: DyREx decoder layers K (default 3, as in the paper).
- ``joint_mode``: ``band`` (spans of at most max_answer_length, memory linear in N) or
  ``full`` (every span, the paper's (N, N) formulation).
- ``query_init_std``: std of the normal init of the learned queries Q0 (None: the head's
  own, 0.02 for static queries and DyREx, 1.0 for DyReF).
- ``max_answer_length``: L of the joint scorers; must equal the decoder's max_answer_length,
  since their span_scores are (B, N, L).
- ``null_head``: how "no answer" is scored: ``span`` (BERT: the [CLS] span inside the start/end
  softmaxes) or a separate answerability classifier (:mod:`structqa.heads.answerability`) on
  the [CLS] state (``cls``) or on [CLS] and the start/end queries (``queries``), its binary loss
  weighted by ``null_loss_weight`` and class-balanced per batch when ``null_balanced``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, fields

from structqa.encoders.bert import EncoderConfig
from structqa.heads.answerability import NULL_SOURCES, AnswerabilityHead
from structqa.heads.base import HeadOutput, QueryHead, QuerySource, Scorer, SpanHead
from structqa.heads.dyref import DyReFQueries
from structqa.heads.dyrex import DyRExQueries
from structqa.heads.independent import IndependentHead, IndependentScorer, StaticQueries
from structqa.heads.joint import JointScorer, joint_scorer


@dataclass(frozen=True)
class HeadOptions:
    query_mask: str = "bidirectional"
    dyrex_layers: int = 3
    joint_mode: str = "band"
    max_answer_length: int = 30
    query_init_std: float | None = None
    null_head: str = "span"
    null_loss_weight: float = 1.0
    null_balanced: bool = True


QUERY_SOURCES: dict[str, Callable[[EncoderConfig, HeadOptions], QuerySource]] = {
    "static": lambda cfg, o: StaticQueries(cfg.hidden_size, o.query_init_std),
    "dyrex": lambda cfg, o: DyRExQueries(cfg, o.dyrex_layers, o.query_mask, o.query_init_std),
    "dyref": lambda cfg, o: DyReFQueries(cfg.hidden_size, o.query_mask, o.query_init_std),
}
SCORERS: dict[str, Callable[[EncoderConfig, HeadOptions], Scorer]] = {
    "independent": lambda cfg, o: IndependentScorer(),
    "joint": lambda cfg, o: joint_scorer(cfg.hidden_size, o.max_answer_length, o.joint_mode),
}


def _compose(queries: str, scorer: str) -> Callable[[EncoderConfig, HeadOptions], SpanHead]:
    def build(cfg: EncoderConfig, opts: HeadOptions) -> SpanHead:
        return QueryHead(QUERY_SOURCES[queries](cfg, opts), SCORERS[scorer](cfg, opts))

    return build


HEADS: dict[str, Callable[[EncoderConfig, HeadOptions], SpanHead]] = {
    # the named class, so checkpoints saved before the query/scorer split still load
    "independent": lambda cfg, o: IndependentHead(cfg.hidden_size, o.query_init_std),
    "joint": _compose("static", "joint"),
    "dyrex": _compose("dyrex", "independent"),
    "dyref": _compose("dyref", "independent"),
    "dyrex+joint": _compose("dyrex", "joint"),
    "dyref+joint": _compose("dyref", "joint"),
}


def _unknown(what: str, name: str, known: list[str]) -> ValueError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {what} {name!r}{hint} (known: {', '.join(sorted(known))})")


def build_head(
    name: str, encoder: EncoderConfig | int, num_heads: int | None = None, **options: object
) -> SpanHead:
    """Build the head ``name`` for an encoder.

    ``encoder`` is the encoder's config (DyREx copies its width, heads, feed-forward size and
    dropout); a bare hidden size stands for a config of that width with ``num_heads`` heads
    (default 1) and a 4x feed-forward. ``options`` are :class:`HeadOptions` fields.
    """
    if name not in HEADS:
        raise _unknown("head", name, list(HEADS))
    known = [f.name for f in fields(HeadOptions)]
    for key in options:
        if key not in known:
            raise _unknown("head option", key, known)
    if not isinstance(encoder, int):
        if num_heads is not None and num_heads != encoder.num_heads:
            raise ValueError(f"num_heads={num_heads} contradicts the encoder's {encoder.num_heads}")
    else:
        encoder = EncoderConfig(
            hidden_size=encoder, num_heads=num_heads or 1, intermediate_size=4 * encoder
        )
    opts = HeadOptions(**options)  # type: ignore[arg-type]
    head = HEADS[name](encoder, opts)
    if opts.null_head == "span":
        return head
    if opts.null_head not in NULL_SOURCES:
        raise _unknown("null head", opts.null_head, ["span", *NULL_SOURCES])
    if not isinstance(head, QueryHead):
        raise ValueError(f"head {name!r} cannot take a separate answerability classifier")
    return AnswerabilityHead(
        head, encoder.hidden_size, opts.null_head, opts.null_loss_weight, opts.null_balanced
    )


__all__ = [
    "HEADS",
    "AnswerabilityHead",
    "QUERY_SOURCES",
    "SCORERS",
    "DyReFQueries",
    "DyRExQueries",
    "HeadOptions",
    "HeadOutput",
    "IndependentHead",
    "IndependentScorer",
    "JointScorer",
    "QueryHead",
    "SpanHead",
    "StaticQueries",
    "build_head",
]
