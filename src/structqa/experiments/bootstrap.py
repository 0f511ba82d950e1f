"""``structqa experiment CONFIG --bootstrap``: each table row against the baseline row, by a
paired bootstrap over the evaluation questions (see :mod:`structqa.metrics.paired`).

table.md's "paired by seed" section shows how a difference varies between training seeds; this
shows how it varies with the choice of evaluation questions, for the seeds both rows have. The
runs' answers are read from their output directories (``<runs dir>/<run>/best/
predictions.json``, or the trained-by directory of a reused result; never committed), so the
section is computed where the runs were trained, and written to ``bootstrap.md`` and
``bootstrap.json`` beside table.md with the command and commit that made them. Extractive
grids only (``structqa compare`` also takes DROP predictions).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from structqa.config import ConfigError
from structqa.experiments.aggregate import (
    METRIC_NAMES,
    _axis_values,
    _cells,
    _key_label,
    _md_row,
)
from structqa.io import write_json, write_text
from structqa.metrics.paired import BootstrapResult, paired_bootstrap
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.scoring import load_gold, score_predictions_file

if TYPE_CHECKING:
    from structqa.experiments.command import Paths
    from structqa.experiments.grid import Experiment, Run

log = logging.getLogger(__name__)

__all__ = ["write_bootstrap"]


class _Scores:
    """Per-question scores of finished runs, each dataset read once."""

    def __init__(self, metric: str, data_dir: str | None, paths: Paths) -> None:
        self.metric = metric
        self.data_dir = data_dir
        self.paths = paths
        self.schemes: set[str] = set()
        self._gold: dict[Path, tuple[str, Mapping[str, Any]]] = {}
        self._runs: dict[str, tuple[Path, np.ndarray]] = {}  # the baseline's runs recur per row

    def eval_file(self, result: Mapping[str, Any]) -> Path:
        """As the trainer resolved it: an absolute or existing relative path as is (a
        validation split under runs/), else under the data directory."""
        data = result["config"]["data"]
        if data.get("eval_size") is not None:
            raise ConfigError(
                f"{result.get('run')}: trained with data.eval_size={data['eval_size']}, so its "
                "answers cover part of the evaluation file; --bootstrap needs all of it"
            )
        path = Path(data["eval"]).expanduser()
        if path.is_absolute() or path.exists():
            return path
        return resolve_data_file(data["eval"], resolve_data_dir(self.data_dir or data.get("dir")))

    def predictions_file(self, run: Run, result: Mapping[str, Any]) -> Path:
        """This experiment's output directory for the run (so --runs-dir counts), or, for a
        result reused from another experiment, the directory that trained it."""
        if result.get("reused_from"):
            out = Path(result["config"]["train"]["output_dir"])
        else:
            out = self.paths.output(run)
        return out / "best" / "predictions.json"

    def of(self, run: Run, result: Mapping[str, Any]) -> tuple[Path, np.ndarray]:
        if run.name not in self._runs:
            self._runs[run.name] = self._score(run, result)
        return self._runs[run.name]

    def _score(self, run: Run, result: Mapping[str, Any]) -> tuple[Path, np.ndarray]:
        path = self.eval_file(result)
        if path not in self._gold:
            self._gold[path] = load_gold(path)
        scheme, gold = self._gold[path]
        self.schemes.add(scheme)
        scores = score_predictions_file(scheme, gold, self.predictions_file(run, result), path)
        return path, scores.metric(self.metric)


def _compare(
    row_runs: Sequence[Run],
    base_runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    scores: _Scores,
    missing: list[str],
    resamples: int,
    seed: int,
) -> BootstrapResult | None:
    """The bootstrap over the seeds both cells have results and saved answers for."""

    def by_seed(members: Sequence[Run]) -> dict[int, Run]:
        return {r.seed: r for r in members if r.name in results}

    mine, base = by_seed(row_runs), by_seed(base_runs)
    a, b = [], []
    for s in sorted(mine.keys() & base.keys()):
        pair = (mine[s], base[s])
        files = [scores.predictions_file(r, results[r.name]) for r in pair]
        absent = [str(f) for f in files if not f.is_file()]
        if absent:
            missing.extend(absent)
            continue
        (eval_a, score_a), (eval_b, score_b) = (scores.of(r, results[r.name]) for r in pair)
        if eval_a != eval_b:
            raise ConfigError(
                f"{pair[0].name} was scored on {eval_a} but {pair[1].name} on {eval_b}: a paired "
                "comparison needs the same evaluation questions"
            )
        a.append(score_a)
        b.append(score_b)
    if not a:
        return None
    return paired_bootstrap(np.stack(a), np.stack(b), resamples=resamples, seed=seed)


def write_bootstrap(
    experiment: Experiment,
    runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    paths: Paths,
    *,
    command: str,
    provenance: Mapping[str, Any],
    data_dir: str | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> Path:
    """Write ``bootstrap.md`` and ``bootstrap.json`` in ``paths.results``; return the .md path.

    The metric is the table's first of ``f1``/``em``, else F1 (said in the header).
    """
    spec = experiment.table
    if spec.baseline is None:
        raise ConfigError(
            f"--bootstrap compares every row with the table's baseline, and "
            f"{experiment.source or experiment.name} has no table.baseline"
        )
    if experiment.kind != "extractive":
        raise ConfigError(
            f"--bootstrap reads extractive QA answers, not a {experiment.kind!r} grid"
        )
    metric = next((m for m in spec.metrics if m in ("f1", "em")), "f1")
    if spec.metrics[0] != metric:
        log.warning(
            "--bootstrap compares %s; the table's first metric is %s", metric, spec.metrics[0]
        )
    name = METRIC_NAMES[metric]
    cells = _cells(experiment, runs)
    rows, columns = _axis_values(cells, len(spec.rows))
    base_row = next(r for r in rows if ",".join(r) == spec.baseline)
    scores = _Scores(metric, data_dir, paths)
    missing: list[str] = []
    table: dict[str, dict[str, Any]] = {}
    head = [_key_label(experiment, k) for k in spec.rows]
    head += (
        [f"{_key_label(experiment, spec.columns)}={c[0]}" for c in columns]
        if spec.columns
        else [name]
    )
    body = []
    for row in rows:
        if row == base_row:
            continue
        values = []
        for col in columns:
            found = None
            if row + col in cells and base_row + col in cells:
                found = _compare(
                    cells[row + col],
                    cells[base_row + col],
                    results,
                    scores,
                    missing,
                    resamples,
                    seed,
                )
            values.append("—" if found is None else f"{found.format()} ({found.n_runs})")
            if found is not None:
                table.setdefault(",".join(row), {})[",".join(col) or name] = found.to_dict()
        body.append(_md_row([*row, *values]))
    missing = list(dict.fromkeys(missing))  # a baseline file is missed once per row
    if not table:
        shown = ", ".join(missing[:3]) or "none"
        raise FileNotFoundError(
            f"--bootstrap: no cell could be compared; runs without saved answers "
            f"(best/predictions.json): {shown}{' ...' if len(missing) > 3 else ''}"
        )
    git = provenance.get("git", {})
    lines = [
        f"# {spec.title or experiment.name}: {name} minus {spec.baseline}, "
        "bootstrap over questions",
        "",
        f"Each cell: mean {name} difference (this row − {spec.baseline}) over the evaluation "
        f"questions, each question's score averaged over the seeds both rows have; "
        f"[95% percentile interval] from {resamples} paired resamples of the "
        "questions (bootstrap seed "
        f"{seed}); p: two-sided, for no difference (the smallest it can show is "
        f"1/{resamples + 1}); (n) seeds. The interval covers the choice of "
        "questions only; table.md's 'paired by seed' section shows the spread between seeds.",
        "",
        *(
            [
                "SQuAD 2.0 answers are scored as saved in best/predictions.json, i.e. at the "
                "no-answer threshold tuned on the evaluation file (table.md's thresholded F1), "
                "not at the official default threshold.",
                "",
            ]
            if "squad2" in scores.schemes
            else []
        ),
        "Questions are resampled one by one; questions about the same passage are not "
        "independent, so the intervals are, if anything, too narrow.",
        "",
        f"- made by: `{command}`",
        f"- commit: {git.get('commit', '—')}{' (dirty)' if git.get('dirty') else ''}",
        f"- at: {datetime.now(UTC).isoformat(timespec='seconds')}",
        "",
        _md_row(head),
        _md_row(["---"] * len(head)),
        *body,
        "",
    ]
    if missing:
        shown = ", ".join(f"`{m}`" for m in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        lines += [
            f"Left out (no saved answers, so their seed pairs are skipped): {shown}{more}.",
            "",
        ]
        log.warning(
            "%d run(s) have no saved predictions; their seed pairs are left out", len(missing)
        )
    results_dir = Path(paths.results)
    out = results_dir / "bootstrap.md"
    write_text(out, "\n".join(lines))
    write_json(
        results_dir / "bootstrap.json",
        {
            "metric": metric,
            "baseline": spec.baseline,
            "resamples": resamples,
            "seed": seed,
            "schemes": sorted(scores.schemes),
            "command": command,
            **provenance,
            "missing_predictions": missing,
            "cells": table,
        },
    )
    return out
