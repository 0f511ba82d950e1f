"""``structqa experiment CONFIG --bootstrap``: each table row against the baseline row, and
each declared contrast (a table without a baseline: its contrasts alone), by a paired
bootstrap over the evaluation questions (see :mod:`structqa.metrics.paired`).

table.md's "paired by seed" section shows how a difference varies between training seeds; this
shows how it varies with the choice of evaluation questions, for the seeds both rows have. The
runs' answers are the ones kept beside their results (``<results dir>/answers/<run>.json.gz``,
committed), else ``<runs dir>/<run>/best/predictions.json`` (for a reused result: those of the
experiment that trained it). A cell whose answers are partly lost keeps the previous
bootstrap.json's entry (marked, naming its seeds and the commit that computed it) when that
one covered more of the paired seeds than can be compared now. Written to
``bootstrap.md`` and ``bootstrap.json`` beside table.md with the command and commit that made
them. A DROP grid's answers are those of its test file (``best/test/predictions.json``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from structqa.config import ConfigError
from structqa.experiments.aggregate import axis_values, group_cells, key_label, md_row
from structqa.experiments.results import ACCURACY, METRIC_NAMES, load_results
from structqa.experiments.spec import Experiment, Run, plan
from structqa.experiments.stale import check_not_stale
from structqa.experiments.store import ANSWERS_DIR, Paths, answers_source, kept_answers
from structqa.io import write_json, write_text
from structqa.metrics.paired import BootstrapResult, paired_bootstrap
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.provenance import git_info, machine_info
from structqa.scoring import load_gold, score_predictions_file

log = logging.getLogger(__name__)

__all__ = ["write_bootstrap"]


class _Scores:
    """Per-question scores of finished runs, each dataset read once."""

    def __init__(
        self, metric: str, data_dir: str | None, paths: Paths, kind: str = "extractive"
    ) -> None:
        self.metric = metric
        self.kind = kind
        self.data_dir = data_dir
        self.paths = paths
        self.schemes: set[str] = set()
        self._gold: dict[Path, tuple[str, Mapping[str, Any]]] = {}
        self._runs: dict[str, tuple[Path, np.ndarray] | None] = {}  # the baseline's recur
        self.missing: list[str] = []  # answers files looked for and not found

    def eval_file(self, result: Mapping[str, Any]) -> Path:
        """The file the run's answers answer (an extractive run's evaluation file, a DROP
        run's test file) as the trainer resolved it: an absolute or existing relative path as
        is (a validation split under runs/), else under the data directory."""
        data = result["config"]["data"]
        name = data["test"] if self.kind == "drop" else data["eval"]
        if data.get("eval_size") is not None:
            raise ConfigError(
                f"{result.get('run')}: trained with data.eval_size={data['eval_size']}, so its "
                "answers cover part of the evaluation file; --bootstrap needs all of it"
            )
        path = Path(name).expanduser()
        if path.is_absolute() or path.exists():
            return path
        return resolve_data_file(name, resolve_data_dir(self.data_dir or data.get("dir")))

    def predictions_file(self, run: Run, result: Mapping[str, Any]) -> Path:
        """The run's kept answers (``<results>/answers/<run>.json.gz``; for a result reused
        from another experiment, that experiment's), else :func:`answers_source` in the
        output directory that trained it (this experiment's, so --runs-dir counts)."""
        kept = kept_answers(self.paths.results, run.name, result)
        if result.get("reused_from"):
            out = Path(result["config"]["train"]["output_dir"])
        else:
            out = self.paths.output(run)
        return kept if kept.is_file() else answers_source(self.kind, out, result["config"]["data"])

    def of(self, run: Run, result: Mapping[str, Any]) -> tuple[Path, np.ndarray] | None:
        """(evaluation file, per-question scores) of a run, or None when its answers are
        nowhere (the file looked for is then listed in :attr:`missing`, once)."""
        if run.name not in self._runs:
            self._runs[run.name] = self._score(run, result)
        return self._runs[run.name]

    def _score(self, run: Run, result: Mapping[str, Any]) -> tuple[Path, np.ndarray] | None:
        answers = self.predictions_file(run, result)
        if not answers.is_file():
            self.missing.append(str(answers))
            return None
        path = self.eval_file(result)
        if path not in self._gold:
            self._gold[path] = load_gold(path)
        scheme, gold = self._gold[path]
        self.schemes.add(scheme)
        scores = score_predictions_file(scheme, gold, answers, path)
        return path, scores.metric(ACCURACY.get(self.metric, self.metric))


@dataclass
class _Cell:
    """One row-vs-baseline comparison: the seeds both have results for, and the bootstrap over
    those of them whose answers were found (None when none were)."""

    paired: list[int]
    used: list[int]
    found: BootstrapResult | None

    def to_dict(self) -> dict[str, Any]:
        assert self.found is not None
        return {**self.found.to_dict(), "seeds": self.used}


def _compare(
    row_runs: Sequence[Run],
    base_runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    scores: _Scores,
    resamples: int,
    seed: int,
) -> _Cell:
    """The bootstrap over the seeds both cells have results and saved answers for."""

    def by_seed(members: Sequence[Run]) -> dict[int, Run]:
        return {r.seed: r for r in members if r.name in results}

    mine, base = by_seed(row_runs), by_seed(base_runs)
    paired = sorted(mine.keys() & base.keys())
    used: list[int] = []
    a, b = [], []
    for s in paired:
        pair = (mine[s], base[s])
        got_a, got_b = (scores.of(r, results[r.name]) for r in pair)
        if got_a is None or got_b is None:
            continue
        (eval_a, score_a), (eval_b, score_b) = got_a, got_b
        if eval_a != eval_b:
            raise ConfigError(
                f"{pair[0].name} was scored on {eval_a} but {pair[1].name} on {eval_b}: a paired "
                "comparison needs the same evaluation questions"
            )
        a.append(score_a)
        b.append(score_b)
        used.append(s)
    if not a:
        return _Cell(paired, used, None)
    found = paired_bootstrap(np.stack(a), np.stack(b), resamples=resamples, seed=seed)
    return _Cell(paired, used, found)


def _previous_cells(
    path: Path, metric: str, baseline: str, resamples: int, seed: int
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The cells of an earlier bootstrap.json made with the same settings, and where they came
    from (commit, time); nothing when there is none or its settings differ."""
    if not path.is_file():
        return {}, {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        log.warning("%s: not read (%s); no earlier cells can be carried over", path, e)
        return {}, {}
    same = (old.get("metric"), old.get("baseline"), old.get("resamples"), old.get("seed"))
    if same != (metric, baseline, resamples, seed):
        return {}, {}
    origin = {"commit": old.get("git", {}).get("commit"), "made_at": old.get("made_at")}
    return old.get("cells", {}), origin


def _carry(old: Mapping[str, Any] | None, cell: _Cell, origin: Mapping[str, Any]) -> dict | None:
    """An earlier result for this cell, kept when this call could not compare every paired
    seed and the earlier one covers more of them than this call can: finished results never
    change and are only ever added, so an earlier cell is still right over the seeds it
    compared (all of them are paired now). It keeps saying which bootstrap computed it, and
    over which seeds (unknown, None, for a cell written before cells listed them, unless it
    covered as many pairs as there are now, i.e. exactly these)."""
    if old is None or cell.used == cell.paired:
        return None
    n_old = int(old.get("n_runs", 0))
    seeds = old.get("seeds")
    if seeds is None:
        seeds = cell.paired if n_old == len(cell.paired) else None
    elif not set(seeds) <= set(cell.paired):
        return None  # (a seed whose result has since been removed: not comparable)
    if n_old > len(cell.paired) or n_old <= len(cell.used):
        return None
    return {**old, "seeds": seeds, "carried_from": old.get("carried_from") or dict(origin)}


def _contrasts(
    experiment: Experiment,
    cells: Mapping[tuple[str, ...], Sequence[Run]],
    columns: Sequence[tuple[str, ...]],
    results: Mapping[str, Mapping[str, Any]],
    scores: _Scores,
    resamples: int,
    seed: int,
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Each ``table.contrasts`` pair (first row minus second) by the same paired bootstrap as
    the baseline comparisons: markdown lines (none without contrasts) and the json entries,
    ``{"FIRST − SECOND": {column: cell}}``."""
    spec = experiment.table
    if not spec.contrasts:
        return [], {}
    name = METRIC_NAMES[scores.metric]
    heads = (
        [f"{key_label(experiment, spec.columns)}={c[0]}" for c in columns]
        if spec.columns
        else [name]
    )
    lines = [
        f"## Contrasts: {name} of the first row minus the second, bootstrap over questions",
        "",
        "Same method as above, for the pairs the YAML's table.contrasts names.",
        "",
        md_row(["contrast", *heads]),
        md_row(["---"] * (len(heads) + 1)),
    ]
    found: dict[str, dict[str, Any]] = {}
    n_rows = len(spec.rows)
    by_label = {",".join(key[:n_rows]): key[:n_rows] for key in cells}  # as the table names rows
    for first, second in spec.contrasts:
        label = f"{first} − {second}"
        values = []
        for col in columns:
            a, b = (by_label.get(r, (r,)) + col for r in (first, second))
            cell = (
                _compare(cells[a], cells[b], results, scores, resamples, seed)
                if a in cells and b in cells
                else None
            )
            if cell is None or cell.found is None:
                values.append("—")
                continue
            entry = cell.to_dict()
            found.setdefault(label, {})[",".join(col) or name] = entry
            values.append(f"{cell.found.format()} ({entry['n_runs']})")
        lines.append(md_row([label, *values]))
    return [*lines, ""], found


def bootstrap_results(
    experiment: Experiment,
    paths: Paths,
    *,
    command: str,
    data_dir: str | None = None,
    resamples: int = 10_000,
) -> Path:
    """``--bootstrap``: :func:`write_bootstrap` over every result in ``paths.results`` (which
    must still stand for the YAML's recipe); the .md path."""
    results = load_results(paths.results)
    if not results:
        raise ConfigError(f"--bootstrap: no results in {paths.results} to compare")
    check_not_stale(experiment, paths, results)
    return write_bootstrap(
        experiment,
        plan(experiment, results),
        results,
        paths,
        command=command,
        provenance={"git": git_info(), "machine": machine_info()},
        data_dir=data_dir,
        resamples=resamples,
    )


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
    if spec.baseline is None and not spec.contrasts:
        raise ConfigError(
            f"--bootstrap compares every row with the table's baseline and each of its "
            f"contrasts, and {experiment.source or experiment.name} has neither table.baseline "
            "nor table.contrasts"
        )
    metric = next((m for m in spec.metrics if m in ("f1", "em", "acc")), "f1")
    if spec.metrics[0] != metric:
        log.warning(
            "--bootstrap compares %s; the table's first metric is %s", metric, spec.metrics[0]
        )
    name = METRIC_NAMES[metric]
    cells = group_cells(experiment, runs)
    rows, columns = axis_values(cells, len(spec.rows))
    # without a baseline, only the contrasts are compared
    base_row = next((r for r in rows if ",".join(r) == spec.baseline), None)
    if spec.baseline is not None and base_row is None:
        raise ConfigError(
            f"--bootstrap: the baseline row {spec.baseline!r} has no finished results yet; "
            "train its runs first (`--dry-run` lists them)"
        )
    scores = _Scores(metric, data_dir, paths, experiment.kind)
    results_dir = Path(paths.results)
    earlier, origin = _previous_cells(
        results_dir / "bootstrap.json", metric, spec.baseline, resamples, seed
    )
    carried: list[str] = []
    table: dict[str, dict[str, Any]] = {}
    head = [key_label(experiment, k) for k in spec.rows]
    head += (
        [f"{key_label(experiment, spec.columns)}={c[0]}" for c in columns]
        if spec.columns
        else [name]
    )
    body = []
    for row in rows if base_row is not None else []:
        if row == base_row:
            continue
        values = []
        for col in columns:
            row_key, col_key = ",".join(row), ",".join(col) or name
            entry: dict[str, Any] | None = None
            if row + col in cells and base_row + col in cells:
                cell = _compare(
                    cells[row + col],
                    cells[base_row + col],
                    results,
                    scores,
                    resamples,
                    seed,
                )
                entry = _carry(earlier.get(row_key, {}).get(col_key), cell, origin)
                if entry is not None:
                    carried.append(f"{row_key} at {col_key}")
                elif cell.found is not None:
                    entry = cell.to_dict()
            if entry is None:
                values.append("—")
            else:
                shown = BootstrapResult.from_dict(entry).format()
                mark = " ‡" if entry.get("carried_from") else ""
                values.append(f"{shown} ({entry['n_runs']}){mark}")
                table.setdefault(row_key, {})[col_key] = entry
        body.append(md_row([*row, *values]))
    contrast_lines, contrasts = _contrasts(
        experiment, cells, columns, results, scores, resamples, seed
    )
    missing = scores.missing
    if not table and not contrasts:
        shown = ", ".join(missing[:3]) or "none"
        raise FileNotFoundError(
            f"--bootstrap: no cell could be compared; runs without saved answers "
            f"(answers/<run>.json.gz or best/predictions.json): "
            f"{shown}{' ...' if len(missing) > 3 else ''}"
        )
    git = provenance.get("git", {})
    made_at = datetime.now(UTC).isoformat(timespec="seconds")
    versus = f"this row − {spec.baseline}" if base_row is not None else "row − row"
    lines = [
        f"# {spec.title or experiment.name}: {name} "
        + (f"minus {spec.baseline}" if base_row is not None else "contrasts")
        + ", bootstrap over questions",
        "",
        f"Each cell: mean {name} difference ({versus}) over the evaluation "
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
                "no-answer threshold tuned on the evaluation file (as table.md's f1 and exact "
                "are).",
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
        f"- at: {made_at}",
        "",
        *([md_row(head), md_row(["---"] * len(head)), *body, ""] if base_row is not None else []),
        *contrast_lines,
    ]
    if carried:
        sources = sorted(
            {
                f"{src.get('commit') or '?'} ({src.get('made_at') or '?'})"
                for row in table.values()
                for c in row.values()
                if (src := c.get("carried_from"))
            }
        )
        lines += [
            "‡ Carried over from an earlier bootstrap.json (commit, time: "
            f"{', '.join(sources)}): some of these runs' answers are neither kept under "
            f"{ANSWERS_DIR}/ nor in the runs directory here, and the earlier bootstrap covered "
            "more of the paired seeds than can be compared now (finished results never "
            "change, so it still holds over its seeds, which bootstrap.json lists; its (n) may "
            "be smaller than table.md's).",
            "",
        ]
    if missing:
        shown = ", ".join(f"`{m}`" for m in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        lines += [
            f"Not found (no saved answers; their seed pairs are skipped, except in cells "
            f"carried over ‡): {shown}{more}.",
            "",
        ]
        log.warning("%d run(s) have no saved answers; their seed pairs are left out", len(missing))
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
            "made_at": made_at,
            "missing_predictions": missing,
            "carried_over": carried,
            "cells": table,
            "contrasts": contrasts,
        },
    )
    return out
