"""What number representations hold and look at: NC-BERT's analyses (Sec. 3.1, Sec. 5.5).

- Table 1, :func:`number_neighbors`: the top-k non-number vocabulary tokens by cosine
  similarity to a number token's input embedding (the "parametric knowledge" of numbers), found
  with FAISS (``IndexFlatIP`` over L2-normalized rows, so inner product = cosine).
- Table 6, :func:`attention_shares`: how the attention of passage number tokens splits between
  the entity tokens of their sentence, their type words and every other token, in the last
  encoder layer and in the NC layer (all heads, and the NC-masked heads alone).
- Table 7, :func:`recall_at_k`: with a passage number's representation as the query over the
  token representations of its passage, Recall@K of its entity and type-word tokens.

"Entity token" and "type word" mean exactly what the NC-Mask channels allow
(:mod:`structqa.attention.nc_masks`): the channel mask functions are materialized with the
model's own :class:`~structqa.attention.nc_masks.NCMaskConfig` (m, k) and the batch's tables,
whether or not the model has an NC layer, so a GenBERT baseline is measured against the same
definitions as NC-BERT. Entity tables come from the spaCy annotation of the drop-train
pipeline; without annotations every entity set is empty.

Dimension letters: B batch, H heads, N tokens, D width, V vocabulary, T number tokens (query
rows) gathered over a batch, K retrieved tokens.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from structqa.attention.masks import materialize
from structqa.attention.nc_masks import (
    NCMaskConfig,
    entity_number,
    type_number,
)
from structqa.features.drop_features import DropBatch
from structqa.features.numbers import find_numbers
from structqa.models.genbert import GenBERT

log = logging.getLogger(__name__)

# The number tokens of the paper's Table 1 (bert-base-uncased), in its order.
PAPER_NUMBERS = ("2018", "50", "114", "2", "11")
FAISS_HINT = "pip install faiss-cpu==1.15.1"

_SPECIAL = re.compile(r"\[[^\[\]]+\]")  # [CLS], [SEP], [PAD], [MASK], [UNK], [unused17], ...
_WORD = re.compile(r"[a-z0-9]*[a-z][a-z0-9]*", re.IGNORECASE)  # ASCII, at least one letter


class FaissMissing(ImportError):
    """FAISS is not installed (the Table 1 probe needs it)."""


def _faiss() -> Any:
    loader_log = logging.getLogger("faiss.loader")
    if loader_log.level == logging.NOTSET:
        loader_log.setLevel(logging.WARNING)  # its CPU-feature probing is INFO-level noise
    try:
        import faiss
    except ImportError as err:
        raise FaissMissing(
            f"the number-embedding probe (NC-BERT Table 1) needs FAISS: {FAISS_HINT}"
        ) from err
    return faiss


# ---- Table 1: neighbours of number embeddings -----------------------------------------------


def is_special(token: str) -> bool:
    """A bracketed vocabulary entry: [CLS], [SEP], [PAD], [MASK], [UNK], [unusedN], ..."""
    return bool(_SPECIAL.fullmatch(token))


def is_numeral(token: str) -> bool:
    """The token (without a leading "##") is one whole number as
    :func:`~structqa.features.numbers.find_numbers` reads numbers with ``words=True``: digits
    ("71", "##5") or number words ("two", "hundred", "million"). Ordinals and decades
    ("15th", "third", "1990s") and roman numerals ("ii") are not numerals."""
    word = token.removeprefix("##")
    return any(s.start == 0 and s.end == len(word) for s in find_numbers(word, words=True))


def is_candidate(token: str, subwords: bool = False) -> bool:
    """Whether a vocabulary token may be listed as a neighbour (the paper's exclusions).

    Excluded: special tokens, numerals (:func:`is_numeral`) and non-alphabetic tokens, where
    "alphabetic" means ASCII letters and digits with at least one letter, so "15th" and
    "1990s" stay (the paper keeps them as DATE-related knowledge) while punctuation, symbols,
    pure digits and non-Latin characters go. "##" continuation pieces are excluded unless
    ``subwords``: the paper's table lists whole words, and a piece such as "##th" is a
    fragment whose meaning depends on the word it ends; with ``subwords`` the alphabetic
    pieces are kept (shown with their "##").
    """
    if is_special(token):
        return False
    word = token
    if token.startswith("##"):
        if not subwords:
            return False
        word = token[2:]
    return bool(_WORD.fullmatch(word)) and not is_numeral(word)


@dataclass(frozen=True)
class Neighbor:
    token: str
    token_id: int
    score: float  # cosine similarity


@dataclass(frozen=True)
class NumberNeighbors:
    number: str
    token_id: int
    neighbors: tuple[Neighbor, ...]  # most similar first


@dataclass(frozen=True)
class NeighborProbe:
    """Table 1: one row per probed number found in the vocabulary."""

    rows: tuple[NumberNeighbors, ...]
    k: int
    candidates: int  # vocabulary tokens that may be neighbours
    missing: tuple[str, ...] = ()  # probed numbers that are not one vocabulary token
    subwords: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "candidates": self.candidates,
            "subwords": self.subwords,
            "missing": list(self.missing),
            "rows": [
                {
                    "number": r.number,
                    "token_id": r.token_id,
                    "neighbors": [
                        {"token": n.token, "token_id": n.token_id, "score": n.score}
                        for n in r.neighbors
                    ],
                }
                for r in self.rows
            ],
        }


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12), dtype=np.float32)


def number_neighbors(
    embeddings: Tensor | np.ndarray,
    vocab: Sequence[str],
    k: int = 5,
    numbers: Sequence[str] | None = PAPER_NUMBERS,
    subwords: bool = False,
) -> NeighborProbe:
    """NC-BERT Table 1: for each probed number token, the ``k`` candidate tokens
    (:func:`is_candidate`) whose embeddings are most cosine-similar to its own.

    ``embeddings`` (V, D) are input word embeddings, row i for ``vocab[i]``. ``numbers`` are
    the tokens to probe, in the output's order (default: the paper's five); ``None`` probes
    every whole-word digit token of the vocabulary. A probed number that is not a vocabulary
    token is listed in ``missing``. The search is exact (``faiss.IndexFlatIP`` over the
    L2-normalized candidate rows); a zero row has similarity 0 to everything.
    """
    faiss = _faiss()
    if isinstance(embeddings, Tensor):
        embeddings = embeddings.detach().float().cpu().numpy()
    emb = np.asarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(vocab):
        raise ValueError(f"embeddings {emb.shape} do not match a vocabulary of {len(vocab)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    candidates = np.asarray(
        [i for i, t in enumerate(vocab) if is_candidate(t, subwords)], dtype=np.int64
    )
    if not len(candidates):
        raise ValueError("no vocabulary token is a candidate neighbour (all excluded)")
    ids: dict[str, int] = {}
    for i, token in enumerate(vocab):
        ids.setdefault(token, i)
    if numbers is None:
        numbers = [t for t in vocab if t.isascii() and t.isdigit()]
    probed = [t for t in numbers if t in ids]
    missing = tuple(t for t in numbers if t not in ids)
    if missing:
        log.info("not in the vocabulary, not probed: %s", ", ".join(missing))
    rows: list[NumberNeighbors] = []
    if probed:
        unit = _unit_rows(emb)
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(np.ascontiguousarray(unit[candidates]))
        queries = np.ascontiguousarray(unit[[ids[t] for t in probed]])
        scores, hits = index.search(queries, min(k, len(candidates)))  # (P, k) each
        for token, row_scores, row_hits in zip(probed, scores, hits, strict=True):
            found = tuple(
                Neighbor(vocab[int(candidates[h])], int(candidates[h]), float(s))
                for s, h in zip(row_scores, row_hits, strict=True)
                if h >= 0
            )
            rows.append(NumberNeighbors(token, ids[token], found))
    return NeighborProbe(tuple(rows), k, len(candidates), missing, subwords)


# ---- running the encoder with its attention -------------------------------------------------


@dataclass(frozen=True)
class EncoderTrace:
    """The encoder of a GenBERT on one batch, with the attention probabilities analysed."""

    last_states: Tensor  # (B, N, D): the last encoder block's output
    last_attention: Tensor  # (B, H, N, N): its last attention sub-layer's probabilities
    nc_states: Tensor | None = None  # (B, N, D): the NC layer's output (= M), if any
    nc_attention: Tensor | None = None  # (B, H, N, N)


@torch.no_grad()
def trace_encoder(model: GenBERT, batch: DropBatch) -> EncoderTrace:
    """Run the encoder (and the NC layer) keeping states and attention probabilities; the
    final states equal ``model.encode(batch)`` (in eval mode)."""
    enc = model.encoder(
        batch.input_ids, batch.attention_mask, batch.token_type_ids, output_attentions=True
    )
    last_states, last_attention = enc.last_hidden_state, enc.attentions[-1].float()
    if model.nc_layer is None:
        return EncoderTrace(last_states, last_attention)
    nc_states, weights = model.nc_layer(last_states, model.nc_layer_mask(batch), need_weights=True)
    return EncoderTrace(last_states, last_attention, nc_states, weights[-1].float())


@dataclass(frozen=True)
class NumberChannels:
    """Per passage-number token, which keys are its entity tokens and its type words."""

    entity: Tensor  # (B, N, N) bool: [b, q, kv] kv is an entity token of q's sentence
    type_words: Tensor  # (B, N, N) bool: kv is one of q's m nearest words within k


def number_channels(batch: DropBatch, cfg: NCMaskConfig) -> NumberChannels:
    """The entity-number and type-number channel masks (:mod:`structqa.attention.nc_masks`),
    materialized for every query row and AND-ed with the key padding; only number-token rows
    are meaningful (the channels leave other rows unrestricted)."""
    b, n = batch.input_ids.shape
    device = batch.input_ids.device
    valid = batch.attention_mask.bool()[:, None, :]  # (B, 1, N)
    entity = entity_number(batch.is_number, batch.is_entity, batch.sentence_id)
    window = (cfg.type_words, cfg.type_window)
    words = type_number(
        batch.is_number, batch.is_word, *window, batch.number_index, batch.is_passage
    )
    ent = materialize(entity, b, 1, n, n, device)[:, 0].expand(b, n, n) & valid
    typ = materialize(words, b, 1, n, n, device)[:, 0].expand(b, n, n) & valid
    return NumberChannels(ent, typ)


# ---- Table 6: attention shares --------------------------------------------------------------

ENTITY, TYPE, OTHER = 0, 1, 2
SHARE_NAMES = ("entity", "type", "other")


def token_shares(
    probs: Tensor, batch: DropBatch, channels: NumberChannels
) -> tuple[Tensor, Tensor]:
    """Per passage number token and head, the share of its attention to entity tokens, type
    words and other tokens: ``shares`` (T, H, 3) and ``attends`` (T, H) bool.

    probs (B, H, N, N). A key both entity token and type word counts as entity (the channels
    overlap; a partition keeps the three shares summing to 1). "Other" is every remaining key
    of the sequence (question, special tokens, the number's own digits, ...), summed directly,
    so a head whose mask forbids those keys gives exactly 0. Shares are normalized by the
    row's total; a row with no allowed key (all-zero probabilities, e.g. on an NC head for a
    number with no entity and no word in reach) has ``attends`` False and shares 0.
    """
    rows = (batch.is_number & batch.is_passage).nonzero(as_tuple=True)  # T query rows
    p = probs[rows[0], :, rows[1], :].float()  # (T, H, N)
    ent = channels.entity[rows]  # (T, N)
    typ = channels.type_words[rows] & ~ent
    other = ~(ent | typ)
    parts = torch.stack([(p * m[:, None, :]).sum(-1) for m in (ent, typ, other)], -1)
    total = parts.sum(-1)  # (T, H)
    attends = total > 0.5  # a softmax row sums to 1, a row with nothing allowed to 0
    shares = torch.where(attends[..., None], parts / total.clamp_min(1e-12)[..., None], 0.0)
    return shares, attends


@dataclass(frozen=True)
class ShareRow:
    """One line of Table 6: mean shares over the number tokens that attend in ``heads``."""

    name: str
    heads: tuple[int, ...]
    entity: float
    type: float
    other: float
    tokens: int  # number tokens averaged
    skipped: int  # number tokens with no allowed key in any of ``heads``
    per_token: np.ndarray = field(repr=False, compare=False)  # (tokens, 3): head-averaged

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "heads": list(self.heads),
            "entity": self.entity,
            "type": self.type,
            "other": self.other,
            "tokens": self.tokens,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class AttentionShares:
    """Table 6. Shares are fractions of a number token's attention (averaged over the given
    heads, then over number tokens)."""

    rows: tuple[ShareRow, ...]
    type_words: int  # m
    type_window: int  # k

    def to_dict(self) -> dict[str, Any]:
        return {
            "type_words": self.type_words,
            "type_window": self.type_window,
            "rows": [r.to_dict() for r in self.rows],
        }


class _ShareAccumulator:
    def __init__(self, name: str, heads: Sequence[int]):
        self.name, self.heads = name, tuple(heads)
        self.tokens: list[Tensor] = []
        self.skipped = 0

    def add(self, shares: Tensor, attends: Tensor) -> None:
        s, a = shares[:, list(self.heads)], attends[:, list(self.heads)]  # (T, h, 3), (T, h)
        count = a.sum(-1)  # (T,)
        mean = (s * a[..., None]).sum(1) / count.clamp_min(1)[:, None]  # (T, 3)
        self.tokens.append(mean[count > 0].cpu())
        self.skipped += int((count == 0).sum())

    def row(self) -> ShareRow:
        per = torch.cat(self.tokens).double().numpy() if self.tokens else np.zeros((0, 3))
        avg = per.mean(0) if len(per) else np.full(3, float("nan"))
        return ShareRow(
            self.name, self.heads, *(float(x) for x in avg), len(per), self.skipped, per
        )


@torch.no_grad()
def attention_shares(model: GenBERT, batches: Iterable[DropBatch]) -> AttentionShares:
    """NC-BERT Table 6: where passage number tokens send their attention.

    For every passage number token (each digit token is a query row of its own), the share
    of its attention probability going to the entity tokens of its own sentence, to its type
    words, and to every other token (:func:`token_shares`), averaged over heads (rows that
    attend nowhere in a head are left out of that head's average), then over number tokens.
    Rows: the last encoder layer over all heads ("Numbers (Original)"); with an NC layer,
    that layer over all heads and over the NC-masked heads alone ("Numbers (NC-BERT)",
    where "other" is 0 by construction when both channels are on).
    """
    was_training = model.training
    model.eval()
    heads = model.encoder.config.num_heads
    cfg = model.config
    accs = {"last": _ShareAccumulator("last encoder layer, all heads", range(heads))}
    if model.nc_layer is not None:
        accs["nc"] = _ShareAccumulator("NC layer, all heads", range(heads))
        names = ", ".join(map(str, cfg.nc_heads))
        accs["nc_heads"] = _ShareAccumulator(f"NC layer, NC heads ({names})", cfg.nc_heads)
    try:
        for batch in batches:
            batch = batch.to(next(model.parameters()).device)
            run = trace_encoder(model, batch)
            channels = number_channels(batch, cfg.nc_mask)
            accs["last"].add(*token_shares(run.last_attention, batch, channels))
            if run.nc_attention is not None:
                shares, attends = token_shares(run.nc_attention, batch, channels)
                accs["nc"].add(shares, attends)
                accs["nc_heads"].add(shares, attends)
    finally:
        model.train(was_training)
    rows = tuple(a.row() for a in accs.values())
    return AttentionShares(rows, cfg.nc_mask.type_words, cfg.nc_mask.type_window)


# ---- Table 7: Recall@K ----------------------------------------------------------------------


@dataclass
class RecallCounts:
    """Sums of per-query recall for one representation, by ground-truth set."""

    ks: tuple[int, ...]
    sums: dict[str, np.ndarray] = field(default_factory=dict)  # set -> (len(ks),)
    queries: dict[str, int] = field(default_factory=dict)  # set -> queries with |G| > 0
    numbers: int = 0  # every query, also those with empty ground truth

    def mean(self, name: str) -> list[float]:
        n = self.queries.get(name, 0)
        if not n:
            return [float("nan")] * len(self.ks)
        return [float(x) for x in self.sums[name] / n]


RECALL_SETS = ("entity", "type", "both")


def recall_counts(
    states: Tensor,
    batch: DropBatch,
    channels: NumberChannels,
    ks: Sequence[int],
    counts: RecallCounts | None = None,
) -> RecallCounts:
    """Add one batch's Recall@K sums to ``counts`` (a new one when None).

    Queries: each passage number, represented by the state of its first token
    (``batch.number_positions``, the position DICE reads too). Candidates: the passage
    tokens of the same sequence, except the tokens of the query number itself. Ground truth:
    the query's entity tokens, its type words, and their union ("both", the paper's single
    figure), each restricted to the candidates. Ranking: cosine similarity of states,
    ties broken by position. Recall@K = |top-K ∩ G| / |G|, for queries with |G| > 0.
    """
    ks = tuple(int(k) for k in ks)
    if counts is None:
        counts = RecallCounts(ks)
    b_idx, m_idx = (batch.number_positions >= 0).nonzero(as_tuple=True)
    if not len(b_idx):
        return counts
    q_pos = batch.number_positions[b_idx, m_idx]  # (T,)
    unit = torch.nn.functional.normalize(states.float(), dim=-1)  # (B, N, D)
    sims = torch.einsum("td,tnd->tn", unit[b_idx, q_pos], unit[b_idx])  # (T, N)
    own = batch.number_index[b_idx] == batch.number_index[b_idx, q_pos][:, None]  # (T, N)
    cand = batch.is_passage[b_idx] & ~own
    order = sims.masked_fill(~cand, float("-inf")).argsort(dim=-1, descending=True, stable=True)
    ent = channels.entity[b_idx, q_pos] & cand  # (T, N)
    typ = channels.type_words[b_idx, q_pos] & cand
    n = states.shape[1]
    at = torch.tensor([min(k, n) - 1 for k in ks], device=states.device)
    counts.numbers += len(b_idx)
    for name, truth in zip(RECALL_SETS, (ent, typ, ent | typ), strict=True):
        size = truth.sum(-1)  # (T,)
        keep = size > 0
        hits = truth.gather(-1, order).cumsum(-1)[:, at]  # (T, len(ks)): hits in top-K
        recall = (hits[keep].double() / size[keep, None]).sum(0).cpu().numpy()
        counts.sums[name] = counts.sums.get(name, np.zeros(len(ks))) + recall
        counts.queries[name] = counts.queries.get(name, 0) + int(keep.sum())
    return counts


@dataclass(frozen=True)
class RecallRow:
    """Recall@K of one representation (one column group of Table 7)."""

    name: str
    ks: tuple[int, ...]
    entity: tuple[float, ...]
    type: tuple[float, ...]
    both: tuple[float, ...]  # entity and type words together as the ground truth
    queries: dict[str, int]  # per set: numbers with a non-empty ground truth
    numbers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ks": list(self.ks),
            "entity": list(self.entity),
            "type": list(self.type),
            "both": list(self.both),
            "queries": dict(self.queries),
            "numbers": self.numbers,
        }


@dataclass(frozen=True)
class NumberRecall:
    """Table 7: one row per representation (last encoder layer; the NC layer when present)."""

    ks: tuple[int, ...]
    rows: tuple[RecallRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"ks": list(self.ks), "rows": [r.to_dict() for r in self.rows]}


def _recall_row(name: str, counts: RecallCounts) -> RecallRow:
    means = {s: tuple(counts.mean(s)) for s in RECALL_SETS}
    queries = {s: counts.queries.get(s, 0) for s in RECALL_SETS}
    return RecallRow(
        name, counts.ks, means["entity"], means["type"], means["both"], queries, counts.numbers
    )


@torch.no_grad()
def recall_at_k(
    model: GenBERT, batches: Iterable[DropBatch], ks: Sequence[int] = (1, 5, 10)
) -> NumberRecall:
    """NC-BERT Table 7: Recall@K of a passage number's entity and type-word tokens when its
    representation retrieves tokens of its passage by cosine similarity
    (:func:`recall_counts` defines queries, candidates and ground truth), macro-averaged over
    numbers with a non-empty ground truth. Representations: the last encoder layer's states
    and, with an NC layer, that layer's output (M, what the heads and decoder read)."""
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive, got {ks}")
    was_training = model.training
    model.eval()
    last = RecallCounts(ks)
    nc = RecallCounts(ks) if model.nc_layer is not None else None
    try:
        for batch in batches:
            batch = batch.to(next(model.parameters()).device)
            run = trace_encoder(model, batch)
            channels = number_channels(batch, model.config.nc_mask)
            recall_counts(run.last_states, batch, channels, ks, last)
            if nc is not None and run.nc_states is not None:
                recall_counts(run.nc_states, batch, channels, ks, nc)
    finally:
        model.train(was_training)
    rows = [_recall_row("last encoder layer", last)]
    if nc is not None:
        rows.append(_recall_row("NC layer (M)", nc))
    return NumberRecall(ks, tuple(rows))


__all__ = [
    "PAPER_NUMBERS",
    "AttentionShares",
    "EncoderTrace",
    "FaissMissing",
    "NeighborProbe",
    "NumberChannels",
    "NumberNeighbors",
    "NumberRecall",
    "RecallCounts",
    "RecallRow",
    "ShareRow",
    "attention_shares",
    "is_candidate",
    "is_numeral",
    "is_special",
    "number_channels",
    "number_neighbors",
    "recall_at_k",
    "recall_counts",
    "token_shares",
    "trace_encoder",
]
