"""Combining the BM25 and dense rankings of a document index's chunks: the convex
combination of min-max normalized scores (Bruch et al. 2023) and reciprocal rank fusion
(Cormack et al. 2009), always over each ranking's top :data:`FUSION_POOL` chunks, so that a
deeper fetch (recall@100) extends the ranking `search` and `ask` use and never reorders it."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009)
#: each ranking's chunks that the two are combined over (min-max normalized over them)
FUSION_POOL = 100


def _min_max(ranking: Sequence[tuple[int, float]]) -> dict[int, float]:
    if not ranking:
        return {}
    scores = [s for _, s in ranking]
    low, span = min(scores), max(scores) - min(scores)
    return {item: (s - low) / span if span > 0 else 1.0 for item, s in ranking}


def combine(
    sparse: Sequence[tuple[int, float]], dense: Sequence[tuple[int, float]], bm25_weight: float
) -> list[tuple[int, float]]:
    """Convex combination: ``bm25_weight`` x BM25's score + (1 - it) x the dense score, each
    min-max normalized over its ranking (an item a ranking lacks scores 0 there); best first,
    ties by id."""
    a, b = _min_max(sparse), _min_max(dense)
    score = {i: bm25_weight * a.get(i, 0.0) + (1 - bm25_weight) * b.get(i, 0.0) for i in a | b}
    return sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))


def fuse(
    rankings: Sequence[Sequence[tuple[int, float]]], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each item scores sum(1 / (k + rank)) over the rankings that
    hold it (rank from 1); best first, ties by id."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, (item, _) in enumerate(ranking, start=1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))


def pooled(
    sparse: Sequence[tuple[int, float]],
    dense: Sequence[tuple[int, float]],
    bm25_weight: float | None,
) -> list[tuple[int, float]]:
    """The combination (``bm25_weight``; None: reciprocal rank fusion) of the two rankings'
    top :data:`FUSION_POOL`, then, after it, of the deeper chunks not already in it: the
    head is what `search` and `ask` rank by whatever the depth fetched (normalized over
    deeper lists, the top 10 moved with the depth an evaluation asked for)."""

    def mix(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]]):
        return fuse([a, b]) if bm25_weight is None else combine(a, b, bm25_weight)

    head = mix(sparse[:FUSION_POOL], dense[:FUSION_POOL])
    if len(sparse) <= FUSION_POOL and len(dense) <= FUSION_POOL:
        return head
    seen = {item for item, _ in head}
    return head + [pair for pair in mix(sparse, dense) if pair[0] not in seen]
