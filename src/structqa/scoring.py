"""Score a predictions file against a dataset file, like the official scripts do."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from structqa.data.squad import decode_failure
from structqa.metrics.drop import (
    QuestionScore,
    drop_question_scores,
    drop_score,
    gold_from_drop_json,
    summarize_drop_scores,
)
from structqa.metrics.paired import BootstrapResult, paired_bootstrap
from structqa.metrics.squad import (
    gold_from_squad_json,
    question_scores_v1,
    raw_scores_v2,
    squad_v1,
    squad_v2,
)


def _load_json(path: str | Path, what: str) -> Any:
    """A JSON file, gzip-compressed when its name ends in ``.gz``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8-sig"))  # (a byte-order mark is tolerated)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise ValueError(f"{path}: the {what} file is not valid gzip ({e})") from None
    except UnicodeDecodeError as e:
        record, _, problem = decode_failure(path, e)  # the line and byte, and what to do
        where = "" if record == "(file)" else f", {record}"
        raise ValueError(f"{path}: the {what} file{where}: {problem}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: the {what} file is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: the {what} file's JSON is nested too deeply to parse") from None


def score_file(
    data_file: str | Path,
    predictions: str | Path | Sequence[str | Path],
    na_probs: str | Path | None = None,
    na_prob_thresh: float = 1.0,
    by: str | None = None,
    dedupe_ids: bool = False,
) -> dict[str, Any]:
    """SQuAD JSON v1.1 -> the v1.1 script's output; v2.0 -> the v2.0 script's; MRQA -> v1.1;
    DROP JSON -> the DROP evaluation's ``global_em``/``global_f1`` (fractions) and per-type
    scores (see ``structqa.metrics.drop.drop_score``); its predictions may be lists of spans.

    ``by`` (DROP JSON only) also groups the questions by that field of each question (e.g.
    ``subset``, which ``structqa mwp`` writes for MAWPS): ``per_<by>`` maps each value to its
    ``count``, ``em`` and ``f1`` (fractions, as the global scores).

    Several predictions files are read as one (the test folds of a cross-validation, say):
    they must answer disjoint questions. ``dedupe_ids``: see :func:`load_gold`."""
    preds = merged_predictions(predictions)
    if by is not None:
        return _drop_score_by(data_file, preds, by, na_probs)
    scheme, gold = load_gold(data_file, dedupe_ids)
    if scheme == "drop":
        _no_na_probs(na_probs)
        return drop_score(gold, preds)
    if scheme == "squad1":
        return squad_v1(gold, preds)
    probs = _load_json(na_probs, "na-probs") if na_probs else None
    return squad_v2(gold, preds, probs, na_prob_thresh)


def _no_na_probs(na_probs: str | Path | None) -> None:
    if na_probs:
        raise ValueError("--na-probs applies to SQuAD 2.0 files, not to DROP")


def _drop_score_by(
    data_file: str | Path, preds: Mapping[str, Any], field: str, na_probs: str | Path | None
) -> dict[str, Any]:
    """:func:`score_file` of a DROP file with ``per_<field>``: the DROP scores of the questions
    grouped by that field of each question (each question must have it)."""
    _no_na_probs(na_probs)
    from structqa.data.table import is_table

    not_json = str(data_file).endswith((".jsonl", ".jsonl.gz")) or is_table(data_file)
    dataset = None if not_json else _load_json(data_file, "dataset")
    if dataset is None or not _is_drop(dataset):
        raise ValueError(f"{data_file}: --by groups the questions of DROP-format files only")
    group_of: dict[str, str] = {}
    for passage_id, passage in dataset.items():
        for n, qa in enumerate(passage["qa_pairs"]):
            if field not in qa:
                raise ValueError(
                    f"{data_file}: passage {passage_id!r}, question {n} "
                    f"({qa.get('query_id', '?')!r}) has no field {field!r} to group by; "
                    "score without --by, or name a field every question has"
                )
            group_of[str(qa["query_id"])] = str(qa[field])
    questions = drop_question_scores(gold_from_drop_json(dataset), preds)
    by_group: dict[str, list[QuestionScore]] = {}
    for qid, score in questions.items():
        by_group.setdefault(group_of[qid], []).append(score)
    return {
        **summarize_drop_scores(questions),
        f"per_{field}": {
            value: {
                "count": len(group),
                "em": float(np.mean([s.em for s in group])),
                "f1": float(np.mean([s.f1 for s in group])),
            }
            for value, group in sorted(by_group.items())
        },
    }


@dataclass(frozen=True, eq=False)
class QuestionScores:
    """Per-question scores of one predictions file, in the dataset's question order."""

    ids: list[str]
    exact_match: np.ndarray  # 0-100 per question
    f1: np.ndarray  # 0-100 per question
    scheme: str  # "squad1", "squad2" or "drop": how each question was scored

    def metric(self, name: str) -> np.ndarray:
        if name == "f1":
            return self.f1
        if name in ("em", "exact", "exact_match"):
            return self.exact_match
        raise ValueError(f"unknown metric {name!r}: use f1 or em")


def load_predictions(path: str | Path) -> dict[str, Any]:
    """A predictions JSON (``.json``, or gzip-compressed ``.json.gz``): the file itself, or
    ``predictions.json`` in a checkpoint directory (or in its ``best/``, where ``structqa
    train`` and ``structqa experiment`` write it)."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / "predictions.json", path / "best" / "predictions.json"):
            if candidate.is_file():
                path = candidate
                break
        else:
            raise FileNotFoundError(
                f"{path}: no predictions.json there or in its best/ (pass the file itself, or a "
                "checkpoint directory that `structqa train`/`evaluate` wrote)"
            )
    preds = _load_json(path, "predictions")
    if not isinstance(preds, dict):
        raise ValueError(f"{path}: predictions must map question id -> answer text")
    return preds


def merged_predictions(paths: str | Path | Sequence[str | Path]) -> dict[str, Any]:
    """One predictions file, or the union of several that answer disjoint questions."""
    if isinstance(paths, (str, Path)):
        return load_predictions(paths)
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    for path in paths:
        for qid, answer in load_predictions(path).items():
            if qid in source:
                raise ValueError(
                    f"{path}: question {qid!r} is answered in {source[qid]} too; several "
                    "predictions files are read as one and must answer disjoint questions"
                )
            merged[qid], source[qid] = answer, str(path)
    return merged


def load_gold(data_file: str | Path, dedupe_ids: bool = False) -> tuple[str, Mapping[str, Any]]:
    """``(scheme, gold)`` for :func:`score_questions`: MRQA JSONL and SQuAD v1.1 -> "squad1",
    SQuAD v2.0 -> "squad2" (gold texts per id; flat records by their questions), DROP JSON ->
    "drop" (gold answers per id). ``dedupe_ids``: a repeated id of an extractive file is
    renamed ``ID#2``, ``ID#3``, ... in file order, as ``evaluate --data.dedupe_ids=true``
    named its answers (else a repeat keeps the last answers, as the official scripts do)."""
    from structqa.data import read_examples
    from structqa.data.flat import is_flat_record, read_flat_list
    from structqa.data.readers import read_extractive
    from structqa.data.table import is_table

    def read(ds: Any) -> tuple[str, Mapping[str, Any]]:  # flat records: SQuAD 1.1 or 2.0
        scheme = "squad2" if ds.version == "2.0" else "squad1"
        return scheme, {ex.id: list(ex.gold_texts) for ex in ds.examples}

    if dedupe_ids:
        return read(read_extractive(data_file, dedupe_ids=True))

    if str(data_file).endswith((".jsonl", ".jsonl.gz")) or is_table(data_file):
        return read(read_examples(data_file))  # MRQA, flat records or a CSV/TSV table
    dataset = _load_json(data_file, "dataset")
    if isinstance(dataset, list) and dataset and is_flat_record(dataset[0]):
        return read(read_flat_list(dataset, data_file))  # parsed once
    if _is_drop(dataset):
        return "drop", gold_from_drop_json(dataset)
    if not isinstance(dataset, dict):
        raise ValueError(
            f"{data_file}: the top level must be an object with a 'data' list (SQuAD) or "
            f"passage ids (DROP), or a list of flat SQuAD records, not a JSON "
            f"{type(dataset).__name__} of other things"
        )
    try:
        gold, _ = gold_from_squad_json(dataset)
    except ValueError as e:
        raise ValueError(f"{data_file}: {e}") from None
    return ("squad2" if _is_v2(dataset) else "squad1"), gold


def score_questions(
    scheme: str, gold: Mapping[str, Any], predictions: Mapping[str, Any]
) -> QuestionScores:
    """One score per gold question, as the official script for ``scheme`` scores it: "squad1"
    as ``evaluate-v1.1.py`` (a missing prediction scores 0); "squad2" as ``evaluate-v2.0.py``
    before any no-answer threshold (the answers are final: "" means no answer, as in the
    predictions.json that structqa writes); "drop" as the DROP evaluation. Their means are the
    official totals."""
    if scheme == "drop":
        scores = drop_question_scores(gold, predictions)
        ids = list(scores)
        return QuestionScores(
            ids,
            100.0 * np.array([scores[q].em for q in ids], dtype=float),
            100.0 * np.array([scores[q].f1 for q in ids], dtype=float),
            "drop",
        )
    if scheme == "squad2":
        return _from_maps("squad2", *raw_scores_v2(gold, predictions))
    if scheme == "squad1":
        return _from_maps("squad1", *question_scores_v1(gold, predictions))
    raise ValueError(f"unknown scoring scheme {scheme!r}: squad1, squad2 or drop")


def question_scores(data_file: str | Path, predictions: Mapping[str, Any]) -> QuestionScores:
    """:func:`score_questions` for the gold answers of ``data_file`` (see :func:`load_gold`)."""
    return score_questions(*load_gold(data_file), predictions)


def _from_maps(scheme: str, exact: Mapping[str, float], f1: Mapping[str, float]) -> QuestionScores:
    ids = list(exact)
    return QuestionScores(
        ids,
        100.0 * np.array([exact[q] for q in ids], dtype=float),
        100.0 * np.array([f1[q] for q in ids], dtype=float),
        scheme,
    )


def _is_v2(dataset: Any) -> bool:
    return str(dataset.get("version", "")).startswith("v2") or any(
        "is_impossible" in qa
        for art in dataset["data"]
        for par in art["paragraphs"]
        for qa in par["qas"]
    )


def _is_drop(dataset: Any) -> bool:
    """DROP JSON: a non-empty mapping of passage ids to {"passage", "qa_pairs"} objects."""
    if not isinstance(dataset, dict) or not dataset:
        return False
    return all(
        isinstance(entry, dict) and "passage" in entry and "qa_pairs" in entry
        for entry in dataset.values()
    )


@dataclass(frozen=True)
class Comparison:
    """:func:`compare_files`' answer: the bootstrap over questions and each run pair's gap."""

    metric: str
    scheme: str
    bootstrap: BootstrapResult
    run_differences: list[float]  # mean(A_i) - mean(B_i) per run pair; [] if the counts differ

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "scheme": self.scheme,
            **self.bootstrap.to_dict(),
            "run_differences": self.run_differences,
        }


def compare_files(
    data_file: str | Path,
    a: Sequence[str | Path],
    b: Sequence[str | Path],
    *,
    metric: str = "f1",
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    parts: int = 1,
    dedupe_ids: bool = False,
) -> Comparison:
    """Paired bootstrap over the questions of ``data_file`` between predictions ``a`` and ``b``
    (files or checkpoint directories; several per side are runs paired by position, e.g. the
    same seeds in the same order; with a different number of runs on each side, each side is
    averaged per question on its own and no run pairs are reported). See
    :mod:`structqa.metrics.paired` for what it measures.

    ``parts`` > 1: each run is that many consecutive files answering disjoint questions (the
    test folds of a cross-validation, say), read as one."""
    if not a or not b:
        raise ValueError("give at least one predictions file on each side")
    if parts < 1:
        raise ValueError(f"--parts {parts}: give 1 (a file is a run) or more")
    if len(a) % parts or len(b) % parts:
        raise ValueError(
            f"--parts {parts}: each side needs a multiple of {parts} files (one run is "
            f"{parts} consecutive files); side A has {len(a)}, side B {len(b)}"
        )
    side_a, side_b = _runs(a, parts), _runs(b, parts)
    scheme, gold = load_gold(data_file, dedupe_ids)
    if not gold:
        raise ValueError(f"{data_file}: no questions to compare on")
    scored = [score_predictions_file(scheme, gold, p, data_file) for p in [*side_a, *side_b]]
    table = np.stack([s.metric(metric) for s in scored])
    runs_a, runs_b = table[: len(side_a)], table[len(side_a) :]
    paired = len(side_a) == len(side_b)
    result = paired_bootstrap(
        runs_a, runs_b, resamples=resamples, confidence=confidence, seed=seed, unequal_runs=True
    )
    gaps = [float(x) for x in runs_a.mean(axis=1) - runs_b.mean(axis=1)] if paired else []
    return Comparison("em" if metric != "f1" else "f1", scheme, result, gaps)


def _runs(files: Sequence[str | Path], parts: int) -> list[list[str | Path]]:
    """``files`` as runs of ``parts`` consecutive files each."""
    return [list(files[i : i + parts]) for i in range(0, len(files), parts)]


def score_predictions_file(
    scheme: str,
    gold: Mapping[str, Any],
    path: str | Path | Sequence[str | Path],
    data_file: str | Path,
) -> QuestionScores:
    """:func:`score_questions` for one predictions file (or several read as one, see
    :func:`merged_predictions`), with errors that name it; a file that answers none of
    ``data_file``'s questions is an error, not a row of zeros."""
    preds = merged_predictions(path)
    if not isinstance(path, (str, Path)):
        path = " + ".join(map(str, path))
    if not any(qid in preds for qid in gold):
        raise ValueError(
            f"{path}: none of its {len(preds)} answers is for a question of {data_file} "
            "(predictions for another dataset?)"
        )
    try:
        return score_questions(scheme, gold, preds)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
