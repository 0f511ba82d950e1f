"""The exported graph: a trained span model as a function of plain tensors.

:class:`SpanGraph` wraps an :class:`~structqa.models.extractive.ExtractiveQAModel` so that it
takes the tensors of a collated :class:`~structqa.features.batching.Batch` (no dataclass, no
gold positions) and returns the tensors of its :class:`~structqa.heads.base.HeadOutput` that
decoding reads. Every span head exports the same way:

- Independent-scorer heads (``independent``, ``dyrex``, ``dyref``) output ``start_logits`` and
  ``end_logits`` (B, N), masked as the torch head masks them;
- joint-scorer heads (``joint``, ``dyrex+joint``, ``dyref+joint``, band or full) also output
  ``span_scores`` (B, N, L), the band of span scores decoding searches exactly, and
  ``null_scores`` (B,). The (N, N) matrix of the ``full`` mode never leaves the graph: decoding
  only reads its band view, as in torch.

So :class:`~structqa.decoding.SpanCollector` receives the same fields from either runtime and
decodes the same answers.

Dimension letters: B batch, N tokens, L max answer length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from structqa.features.batching import Batch
from structqa.heads.answerability import AnswerabilityHead
from structqa.heads.joint import JointScorer
from structqa.models.extractive import ExtractiveQAModel

#: Inputs every graph takes, in order: (B, N) int64, int64, int64, bool.
BASE_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "answer_mask")
#: Token-tag inputs (``Batch`` fields) an encoder may read, in order: (B, N) int64, bool.
TAG_INPUTS = ("pos_tag_ids", "entity_mask")
TOKEN_OUTPUTS = ("start_logits", "end_logits")
SPAN_OUTPUTS = ("span_scores", "null_scores")
#: (B,) the answerability classifier's no-answer log-odds (``model.null_head`` cls/queries)
ODDS_OUTPUTS = ("null_odds",)
#: outputs of one value per window, not per token
PER_WINDOW = ("null_scores", "null_odds")


@dataclass(frozen=True)
class GraphSignature:
    """The names of a graph's inputs and outputs (saved with the export)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "tokens"} for name in self.inputs}
        for name in self.outputs:
            axes[name] = {0: "batch"} if name in PER_WINDOW else {0: "batch", 1: "tokens"}
        return axes


def scores_spans(model: ExtractiveQAModel) -> bool:
    """Whether the model's head scores spans jointly (its output has span_scores)."""
    return any(isinstance(m, JointScorer) for m in model.head.modules())


def classifies_answerability(model: ExtractiveQAModel) -> bool:
    """Whether the model's no-answer decision is its own classifier's (its output has
    null_odds): without that output in the graph, an export would never abstain."""
    return isinstance(model.head, AnswerabilityHead)


def signature(model: ExtractiveQAModel, tags: tuple[str, ...]) -> GraphSignature:
    """The graph signature of ``model`` fed the token-tag fields ``tags`` (of TAG_INPUTS)."""
    outputs = TOKEN_OUTPUTS + (SPAN_OUTPUTS if scores_spans(model) else ())
    outputs += ODDS_OUTPUTS if classifies_answerability(model) else ()
    return GraphSignature(BASE_INPUTS + tuple(t for t in TAG_INPUTS if t in tags), outputs)


class SpanGraph(nn.Module):
    """``model`` as a function of the batch tensors named in ``sig.inputs``."""

    def __init__(self, model: ExtractiveQAModel, sig: GraphSignature):
        super().__init__()
        self.model, self.sig = model, sig

    def forward(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        named = dict(zip(self.sig.inputs, tensors, strict=True))
        ids = named["input_ids"]
        # gold positions only feed the loss, which is no output: the exporter drops it
        gold = torch.zeros_like(ids[:, 0])
        batch = Batch(
            input_ids=ids,
            attention_mask=named["attention_mask"],
            token_type_ids=named["token_type_ids"],
            answer_mask=named["answer_mask"],
            start_positions=gold,
            end_positions=gold,
            feature_index=gold,
            pos_tag_ids=named.get("pos_tag_ids"),
            entity_mask=named.get("entity_mask"),
        )
        out = self.model(batch)
        values = {
            "start_logits": out.start_logits,
            "end_logits": out.end_logits,
            "span_scores": out.span_scores,
            "null_scores": out.null_scores,
            "null_odds": out.null_odds,
        }
        return tuple(values[name] for name in self.sig.outputs)


def batch_inputs(batch: Batch, sig: GraphSignature) -> tuple[Tensor, ...]:
    """The tensors of ``batch`` a graph of signature ``sig`` takes, in order."""
    return tuple(getattr(batch, name) for name in sig.inputs)
