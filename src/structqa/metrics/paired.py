"""Paired bootstrap over questions: does system A score higher than system B by more than the
choice of evaluation questions explains?

Both systems are scored on the same questions, so the comparison is paired: each question
contributes the difference of its two scores, and the bootstrap resamples questions with
replacement and recomputes the mean difference (Efron and Tibshirani 1993; Koehn 2004;
Berg-Kirkpatrick et al. 2012). Easy and hard questions cancel out of the difference, which is
why a paired interval is much narrower than two unpaired ones.

With several runs per system (seeds), each question's score is first averaged over that
system's runs. Give both sides the same seeds (the same training subsets); their order does
not change the result. The interval then covers the variation from sampling the questions
for those runs (one by one: questions about the same passage are not independent, so it is, if
anything, too narrow); it does not cover the variation between training seeds, which is what a
seed-paired mean ± std (the experiment tables' "paired by seed" section) shows.
Read the two together: a difference can lie outside both, inside one, or inside neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["BootstrapResult", "paired_bootstrap"]

_CHUNK = 256  # resamples drawn at once (a chunk x n_questions index matrix)


@dataclass(frozen=True)
class BootstrapResult:
    """Mean scores, their difference (A - B) and its bootstrap interval and p-value."""

    n_questions: int
    n_runs: int  # runs per system, averaged per question
    mean_a: float
    mean_b: float
    difference: float  # mean_a - mean_b
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float  # two-sided, for "no difference"
    resamples: int
    seed: int
    n_runs_b: int | None = None  # B's runs where they differ from A's (unpaired by seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BootstrapResult:
        """The result :meth:`to_dict` wrote (other keys beside its fields are ignored; a field
        with a default may be missing, as in results written before it existed)."""
        return cls(
            **{
                name: data[name]
                for name, f in cls.__dataclass_fields__.items()
                if name in data or f.default is MISSING
            }
        )

    def format(self) -> str:
        """``+1.40 [+0.62, +2.18], p 0.001``."""
        return (
            f"{self.difference:+.2f} [{self.ci_low:+.2f}, {self.ci_high:+.2f}], "
            f"p {self.p_value:.3g}"
        )


def _as_runs(scores: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(scores, dtype=float)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(
            f"{name}: expected per-question scores, shape (questions,) or (runs, questions) with "
            f"at least one of each; got shape {np.shape(scores)}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: scores must be finite numbers")
    return arr


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    unequal_runs: bool = False,
) -> BootstrapResult:
    """Paired bootstrap of mean(A) - mean(B) over questions.

    ``a`` and ``b`` are per-question scores, shape ``(questions,)`` or ``(runs, questions)``,
    with the same questions in the same columns and, for several runs, the same number of runs
    (paired by row) unless ``unequal_runs``: then each side's runs are averaged per question on
    their own (one build against a baseline's five seeds, say; the questions are still paired,
    the seeds are not). Returns the observed difference, the percentile interval at ``confidence``
    and a two-sided p-value: the share of resampled differences, centred on the observed one,
    at least as far from it as the observed difference is from zero, counted as
    ``(k + 1) / (resamples + 1)`` so that it is never exactly zero. Deterministic for a seed.
    """
    runs_a, runs_b = _as_runs(a, "a"), _as_runs(b, "b")
    if runs_a.shape[1] != runs_b.shape[1] or (runs_a.shape != runs_b.shape and not unequal_runs):
        raise ValueError(
            f"a and b must pair up: shapes {runs_a.shape} and {runs_b.shape} differ (the same "
            "questions in the same order, and as many runs on each side)"
        )
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    per_question = runs_a.mean(axis=0) - runs_b.mean(axis=0)
    n = per_question.size
    observed = float(per_question.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        k = min(_CHUNK, resamples - start)
        means[start : start + k] = per_question[rng.integers(0, n, size=(k, n))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    # Differences within rounding of the observed one count as "as far": with identical
    # systems every resample is 0 and p must come out as 1.
    far = np.abs(means - observed) >= abs(observed) - 1e-12
    p_value = (int(far.sum()) + 1) / (resamples + 1)
    return BootstrapResult(
        n_questions=n,
        n_runs=runs_a.shape[0],
        mean_a=float(runs_a.mean()),
        mean_b=float(runs_b.mean()),
        difference=observed,
        ci_low=float(low),
        ci_high=float(high),
        confidence=confidence,
        p_value=float(p_value),
        resamples=resamples,
        seed=seed,
        n_runs_b=runs_b.shape[0] if runs_b.shape[0] != runs_a.shape[0] else None,
    )
