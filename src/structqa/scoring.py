"""Score a predictions file against a dataset file, like the official scripts do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from structqa.metrics.drop import drop_score, gold_from_drop_json
from structqa.metrics.squad import gold_from_squad_json, squad_v1, squad_v2


def _load_json(path: str | Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: the {what} file is not valid JSON ({e})") from None


def score_file(
    data_file: str | Path,
    predictions: str | Path,
    na_probs: str | Path | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, Any]:
    """SQuAD JSON v1.1 -> the v1.1 script's output; v2.0 -> the v2.0 script's; MRQA -> v1.1;
    DROP JSON -> the DROP evaluation's ``global_em``/``global_f1`` (fractions) and per-type
    scores (see ``structqa.metrics.drop.drop_score``); its predictions may be lists of spans."""
    preds = _load_json(predictions, "predictions")
    if not isinstance(preds, dict):
        raise ValueError(f"{predictions}: predictions must map question id -> answer text")
    name = str(data_file)
    if name.endswith((".jsonl", ".jsonl.gz")):
        from structqa.data import read_examples

        ds = read_examples(data_file)
        return squad_v1({ex.id: list(ex.gold_texts) for ex in ds.examples}, preds)
    dataset = _load_json(data_file, "dataset")
    if _is_drop(dataset):
        if na_probs:
            raise ValueError("--na-probs applies to SQuAD 2.0 files, not to DROP")
        return drop_score(gold_from_drop_json(dataset), preds)
    gold, _ = gold_from_squad_json(dataset)
    is_v2 = str(dataset.get("version", "")).startswith("v2") or any(
        "is_impossible" in qa
        for art in dataset["data"]
        for par in art["paragraphs"]
        for qa in par["qas"]
    )
    if not is_v2:
        return squad_v1(gold, preds)
    probs = _load_json(na_probs, "na-probs") if na_probs else None
    return squad_v2(gold, preds, probs, na_prob_thresh)


def _is_drop(dataset: Any) -> bool:
    """DROP JSON: a non-empty mapping of passage ids to {"passage", "qa_pairs"} objects."""
    if not isinstance(dataset, dict) or not dataset:
        return False
    return all(
        isinstance(entry, dict) and "passage" in entry and "qa_pairs" in entry
        for entry in dataset.values()
    )
