"""A run's result JSON as the tables read it: metric names, a metric's value, loading results.

The bottom of the experiments package: the grid (which metrics a table may name), the tables
and the runner all read results through these, and it imports nothing of theirs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from structqa.io import UnreadableFile, read_json
from structqa.metrics.drop import ANSWER_TYPES

METRIC_NAMES = {
    "f1": "F1",
    "em": "EM",
    **{f"{t}_f1": f"{t} F1" for t in ANSWER_TYPES},
    **{f"{t}_em": f"{t} EM" for t in ANSWER_TYPES},
    "acc": "accuracy",
    "dev_f1": "dev F1",
    "dev_em": "dev EM",
    "dev_acc": "dev accuracy",
    "last_f1": "F1 after the last epoch",
    "last_em": "EM after the last epoch",
}

# ``last_<metric>``: the metric of the run's last evaluation in its eval_history (the
# checkpoint that a grid without per-epoch evaluation would score), rather than best/'s
LAST_PREFIX = "last_"

_EM_KEYS = ("exact_match", "exact")  # SQuAD v1.1 / MRQA, and v2.0

# word problems (`structqa mwp` files) have one number answer each: their accuracy is the
# DROP exact match, named as the field reports it
ACCURACY = {"acc": "exact_match", "dev_acc": "dev_em"}

# The table of a `kind: drop` experiment (NC-BERT Tables 2, 3, 5): test-file EM and F1, F1 per
# answer type, and the dev F1 that selected the checkpoint
DROP_METRICS = ("em", "f1", "number_f1", "date_f1", "span_f1", "spans_f1", "dev_f1")

# Every metric name a table may ask of each kind of result (with ``last_`` before any of
# them: the value of the final evaluation): SQuAD v1.1/MRQA and v2.0 keys, and the DROP keys
# of :func:`drop_table_metrics`. A name outside them is a typo caught when the YAML loads.
EXTRACTIVE_METRIC_NAMES = frozenset(
    {"f1", "em", "exact_match", "exact", "total", "null_threshold"}
    | {f"best_{m}" for m in ("exact", "exact_thresh", "f1", "f1_thresh")}
    | {f"{part}_{m}" for part in ("HasAns", "NoAns") for m in ("exact", "f1", "total")}
    | {"NoAns_auc", "forced_HasAns_f1"}  # structqa.evaluation.answerability_metrics
)

DROP_METRIC_NAMES = frozenset(
    {"f1", "em", "exact_match", "dev_em", "dev_f1", *ACCURACY}
    | {f"{t}_{m}" for t in ("number", "date", "span", "spans") for m in ("em", "f1")}
)


def drop_table_metrics(test: Mapping[str, Any], dev: Mapping[str, Any]) -> dict[str, float | None]:
    """The ``metrics`` of a DROP run's result: official DROP scores (fractions) of the test
    and dev files as percentages, ``exact_match``/``f1`` for the test file (the names of the
    extractive results), ``<type>_em``/``<type>_f1`` for each answer type (null where the test
    file has none), ``dev_em``/``dev_f1``."""
    out: dict[str, float | None] = {
        "exact_match": 100.0 * float(test["global_em"]),
        "f1": 100.0 * float(test["global_f1"]),
    }
    per_type = test.get("per_type", {})
    for kind in ANSWER_TYPES:
        scores = per_type.get(kind)
        for name in ("em", "f1"):
            out[f"{kind}_{name}"] = None if scores is None else 100.0 * float(scores[name])
    out["dev_em"] = 100.0 * float(dev["global_em"])
    out["dev_f1"] = 100.0 * float(dev["global_f1"])
    return out


def metric_value(metrics: Mapping[str, Any], name: str) -> float:
    """``f1``, ``em`` (exact_match, or v2.0's exact) or any key of a metrics.json."""
    name = ACCURACY.get(name, name)
    keys = _EM_KEYS if name in ("em", *_EM_KEYS) else (name,)
    for key in keys:
        if key in metrics:
            return float(metrics[key])
    raise KeyError(f"metric {name!r} not in the results' metrics ({', '.join(sorted(metrics))})")


def result_metric(result: Mapping[str, Any], name: str) -> float | None:
    """A metric of one run's result: ``last_f1``/``last_em`` from the last entry of its
    ``eval_history`` (only if that evaluation was at the run's final step), any other name
    from its ``metrics`` (see :func:`metric_value`); None where the result has no such value."""
    if name.startswith(LAST_PREFIX):
        history = result.get("eval_history") or []
        if not history or history[-1].get("step") != result.get("steps"):
            return None
        return metric_value(history[-1], name[len(LAST_PREFIX) :])
    metrics = result["metrics"]
    if name in metrics and metrics[name] is None:  # e.g. a DROP answer type the file lacks
        return None
    return metric_value(metrics, name)


def sample_std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); None for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


#: what to do with a result file that does not parse (a merge conflict, a copy cut short)
RESULT_REMEDY = (
    "restore it (`git checkout -- FILE` for a committed one) or move it aside to train that "
    "run again"
)


def load_results(results_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Every ``runs/*.json`` under an experiment's results directory, by run name."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((Path(results_dir) / "runs").glob("*.json")):
        result = read_json(path, RESULT_REMEDY)
        if not isinstance(result, dict):
            raise UnreadableFile(path, "not a run's result (a JSON object)", RESULT_REMEDY)
        out[result.get("run", path.stem)] = result
    return out
