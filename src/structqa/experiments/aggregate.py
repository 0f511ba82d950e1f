"""Results of an experiment's runs -> mean ± std tables (markdown) and a summary JSON.

A cell is one combination of the table's row and column keys; its runs differ only by seed.
Cells show ``mean ± std (n)`` with the sample standard deviation (ddof=1); a single seed has no
std and shows ``n/a``. Only runs of the current plan are counted, so a changed grid never
mixes stale results into its table. A metric that is null in a result (a DROP answer type the
test file lacks) is left out of its cell.
"""

from __future__ import annotations

import logging
import shlex
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.experiments.results import LAST_PREFIX, METRIC_NAMES, result_metric, sample_std
from structqa.experiments.spec import Experiment, Run
from structqa.io import write_json, write_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CellStats:
    seeds: tuple[int, ...]  # seeds with a result, sorted
    expected: int  # runs the plan has for this cell
    means: dict[str, float | None]
    stds: dict[str, float | None]
    counts: dict[str, int]  # values behind each metric's mean (a last_ metric may lack some)

    @property
    def n(self) -> int:
        return len(self.seeds)

    def format(self, metric: str) -> str:
        mean, std = self.means[metric], self.stds[metric]
        if mean is None:
            return "—"
        return f"{mean:.2f} ± {'n/a' if std is None else f'{std:.2f}'} ({self.counts[metric]})"


def cell_stats(
    runs: Sequence[Run], results: Mapping[str, Mapping[str, Any]], metrics: Sequence[str]
) -> CellStats:
    done = [r for r in runs if r.name in results]
    means: dict[str, float | None] = {}
    stds: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for metric in metrics:
        found = (result_metric(results[r.name], metric) for r in done)
        values = [v for v in found if v is not None]
        means[metric] = statistics.fmean(values) if values else None
        stds[metric] = sample_std(values)
        counts[metric] = len(values)
    return CellStats(tuple(sorted(r.seed for r in done)), len(runs), means, stds, counts)


def group_cells(experiment: Experiment, runs: Sequence[Run]) -> dict[tuple[str, ...], list[Run]]:
    """Runs grouped by (row labels..., column label), in plan order."""
    spec = experiment.table
    keys = [*spec.rows, *([spec.columns] if spec.columns else [])]
    cells: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        cells.setdefault(run.cell(keys), []).append(run)
    return cells


def axis_values(cells: Mapping[tuple[str, ...], Any], n_rows: int) -> tuple[list, list]:
    rows = list(dict.fromkeys(key[:n_rows] for key in cells))
    columns = list(dict.fromkeys(key[n_rows:] for key in cells))
    return rows, columns


def key_label(experiment: Experiment, key: str) -> str:
    return experiment.labels.get(key, key)


def _cell_name(experiment: Experiment, keys: Sequence[str], labels: Sequence[str]) -> str:
    pairs = zip(keys, labels, strict=True)
    return ", ".join(f"{key_label(experiment, k)}={v}" for k, v in pairs) or "all"


def summary(
    experiment: Experiment, runs: Sequence[Run], results: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``{row: {column: {"f1_mean", "f1_std", "em_mean", "em_std", "seeds"}}}`` (``{row: {...}}``
    without a column key). Several row keys join their labels with commas; the table's
    ``summary_names`` rename rows. Cells without any result are left out; a single seed's std
    is null."""
    spec = experiment.table
    out: dict[str, Any] = {}
    for key, members in group_cells(experiment, runs).items():
        stats = cell_stats(members, results, spec.metrics)
        if not stats.n:
            continue
        entry: dict[str, Any] = {}
        for metric in spec.metrics:
            entry[f"{metric}_mean"] = stats.means[metric]
            entry[f"{metric}_std"] = stats.stds[metric]
        entry["seeds"] = list(stats.seeds)
        row = ",".join(key[: len(spec.rows)])
        row = spec.summary_names.get(row, row)
        if spec.columns:
            out.setdefault(row, {})[key[-1]] = entry
        else:
            out[row] = entry
    return out


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _machine(result: Mapping[str, Any]) -> str:
    m = result.get("machine", {})
    cpu = str(m.get("cpu", "unknown CPU"))
    if m.get("cpu_kind"):  # recorded since 2026-11-27: says whether bf16 is also fast
        cpu += f" ({m['cpu_kind']})"
    elif m.get("cpu_capability"):  # recorded since 2026-11-23 (3107a66)
        cpu += f" ({m['cpu_capability']}{', native bf16' if m.get('native_bf16') else ''})"
    parts = [
        cpu,
        f"{m.get('cores', '?')} cores",
        f"{m.get('torch_threads', '?')} torch threads",
        f"torch {m.get('torch', '?')}",
    ]
    if m.get("gpu"):
        parts.append(f"GPU {m['gpu']}")
    parts.append(f"{result.get('device', '?')}, bf16 {'on' if result.get('bf16') else 'off'}")
    return " · ".join(parts)


def _mixed_precision(runs: Sequence[Run], results: Mapping[str, Mapping[str, Any]]) -> str:
    """A header line when some finished runs trained under bf16 autocast and others in fp32
    (``train.bf16: auto`` resolves by machine), naming the runs of the smaller group; else ''.
    A result that does not record ``bf16`` counts as neither."""
    done = [(r.name, results[r.name].get("bf16")) for r in runs if r.name in results]
    on = [name for name, bf16 in done if bf16 is True]
    off = [name for name, bf16 in done if bf16 is False]
    if not on or not off:
        return ""
    fewer, label = (on, "bf16") if len(on) < len(off) else (off, "fp32")
    shown = ", ".join(f"`{n}`" for n in fewer[:8]) + (" ..." if len(fewer) > 8 else "")
    runs_on = f"{len(on)} run{'s' if len(on) > 1 else ''}"
    return (
        f"- precision: mixed, bf16 autocast in {runs_on} and fp32 in {len(off)} ({label}: "
        f"{shown}); a difference between runs in different formats includes the format's "
        "own effect"
    )


def _start(result: Mapping[str, Any]) -> str:
    """The checkpoint a run started from, as recorded when it started: what the config named,
    the weights' hash, and a built reader's commit."""
    start = result["init_from"]
    text = f"`{start.get('given')}` (weights sha256 `{str(start.get('weights_sha256'))[:12]}`"
    reader = start.get("reader") or {}
    if reader.get("commit"):
        text += f", a reader built at `{str(reader['commit'])[:12]}`"
    return text + ")"


def _init_weights(result: Mapping[str, Any]) -> str:
    """The ``model.init`` checkpoint a run started from (a DROP run's), by the digest of its
    weights recorded when it finished (``local_weights``); '' for a result without one (made
    before digests were recorded, or not started from a local checkpoint)."""
    recorded = result.get("local_weights")
    entry = recorded.get("model.init") if isinstance(recorded, Mapping) else None
    if not isinstance(entry, Mapping) or not entry.get("weights_sha256"):
        return ""
    return f"`{entry.get('path')}` (weights sha256 `{str(entry['weights_sha256'])[:12]}`)"


def _eval_limits(done: Sequence[Mapping[str, Any]]) -> str:
    """A header line for results scored on part of their evaluation file (``data.eval_size``):
    which first N questions of which file, and of how many runs; '' when none was."""
    limits: dict[tuple[int, str], int] = {}
    for r in done:
        data = (r.get("config") or {}).get("data") or {}
        if data.get("eval_size") is not None:
            file = f"`{data['eval']}`" if data.get("eval") else "the evaluation file"
            key = (int(data["eval_size"]), file)
            limits[key] = limits.get(key, 0) + 1
    if not limits:
        return ""
    parts = [
        f"the first {size} questions of {file}"
        + ("" if count == len(done) else f" ({count} of {len(done)} runs)")
        for (size, file), count in limits.items()
    ]
    return (
        f"- evaluation: scored on {'; '.join(parts)} (data.eval_size), not the whole file: "
        "not comparable with a table scored on all of it"
    )


def _commit(result: Mapping[str, Any]) -> str:
    git = result.get("git") or {}
    if not git.get("commit"):
        return "`unknown` (not a git checkout)"
    if git.get("dirty") is None:  # e.g. a copy without .git whose commit was only stated
        how = f"stated by {git['source']}" if git.get("source") else "not checked"
        return f"`{git['commit'][:12]}` ({how}, not checked for edits)"
    return f"`{git['commit'][:12]}` ({'dirty' if git['dirty'] else 'clean'})"


PATH_FLAGS = ("--results", "--runs-dir", "--data")


def _path_flags(command: str) -> tuple[str, ...]:
    """The ``--results``/``--runs-dir``/``--data`` options of a recorded command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return ()
    out: list[str] = []
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag not in PATH_FLAGS:
            continue
        if not eq:
            if i + 1 >= len(words):
                continue
            value = words[i + 1]
        out += [flag, value]
    return tuple(out)


def _reproduce_line(config_file: str, done: Sequence[Mapping[str, Any]]) -> str:
    """``structqa experiment CONFIG`` plus the path options the results were made with: one
    command when they all agree, else each distinct one (a run's JSON keeps its full command).
    Results reused from another experiment (or made by another config) do not count."""
    own = [  # not results reused from another experiment, whose paths are that one's
        str(r.get("command") or "")
        for r in done
        if not r.get("reused_from") and config_file in str(r.get("command") or "").split()
    ]
    variants = list(dict.fromkeys(_path_flags(c) for c in own))
    commands = [shlex.join(["structqa", "experiment", config_file, *v]) for v in variants or [()]]
    if len(commands) == 1:
        return f"- reproduce: `{commands[0]}`"
    shown = "; ".join(f"`{c}`" for c in commands)
    return f"- reproduce: {shown} (the results were made with different path options)"


def render_table(
    experiment: Experiment,
    runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    config_file: str,
) -> str:
    """The markdown of table.md: a provenance header, then the tables."""
    spec = experiment.table
    cells = group_cells(experiment, runs)
    done = [results[r.name] for r in runs if r.name in results]
    planned = {r.name for r in runs}
    ignored = sorted(set(results) - planned)
    cell_keys = [*spec.rows, *([spec.columns] if spec.columns else [])]
    stats = {key: cell_stats(members, results, spec.metrics) for key, members in cells.items()}

    lines = [f"# {spec.title or experiment.name}", ""]
    if experiment.description:
        lines += [experiment.description.strip(), ""]
    lines.append(f"- config: `{config_file}`")
    lines.append(_reproduce_line(config_file, done))
    total = sum(float(r.get("wall_time_s", 0.0)) for r in done)
    extra = sum(r.extra for r in runs)
    extra_note = f", incl. {extra} extra-seed runs" if extra else ""
    lines.append(
        f"- runs: {len(done)} of {len(runs)} finished{extra_note}; "
        f"total wall time {_duration(total)}"
    )
    commits = list(dict.fromkeys(_commit(r) for r in done))
    machines = list(dict.fromkeys(_machine(r) for r in done))
    lines.append(f"- commit(s): {', '.join(commits) or '—'}")
    lines.append(f"- machine(s): {'; '.join(machines) or '—'}")
    mixed = _mixed_precision(runs, results)
    if mixed:
        lines.append(mixed)
    starts = list(dict.fromkeys(_start(r) for r in done if r.get("init_from")))
    if starts:
        lines.append(f"- started from (model.init_from): {'; '.join(starts)}")
    inits = list(dict.fromkeys(init for r in done if (init := _init_weights(r))))
    if inits:
        lines.append(f"- started from (model.init): {'; '.join(inits)}")
    limited = _eval_limits(done)
    if limited:
        lines.append(limited)
    arms = list(
        dict.fromkeys(
            encoder.removeprefix("pretrain:")
            for r in runs
            if r.name in results and experiment.pretrain is not None
            for encoder in [str(getattr(experiment.config_for(r).model, "encoder", ""))]
            if encoder.startswith("pretrain:")
        )
    )
    if arms:
        lines.append(
            f"- pre-training arms: {', '.join(f'`{a}`' for a in arms)}; each arm's recipe, "
            "held-out MLM scores, command, commit, machine and wall time are in "
            "`pretrain/<arm>.json` beside this table"
        )
    reused = [r["reused_from"] for r in done if r.get("reused_from")]
    if reused:
        dirs = dict.fromkeys(str(x["result"]).rsplit("/runs/", 1)[0] for x in reused)
        sources = ", ".join(f"`{d}`" for d in dirs)
        lines.append(
            f"- reused: {len(reused)} of these results were trained by another experiment with "
            f"an identical config ({sources}); each run's JSON names its source (reused_from)"
        )
    lines.append(
        "- cells: mean ± sample std (ddof=1) over seeds, (n) = seeds with a result; "
        "the std of a single seed is n/a"
    )
    if experiment.kind == "drop":
        lines.append(
            "- scores: official DROP EM/F1 in percent on the test file (data.test), answered by "
            "best/, the checkpoint of the best dev F1 (data.eval); per-type columns are F1 by "
            "gold answer type; dev F1 is best/'s"
        )
    elif any(m.startswith(LAST_PREFIX) for m in spec.metrics):
        lines.append(
            "- scores: F1/EM are those of best/, the epoch with the best F1 on data.eval; "
            "'after the last epoch' is the final checkpoint's, the one a grid that scores "
            "only once (eval_every_epoch: false) would report"
        )
    noisy = experiment.seeds_if_noisy
    if noisy is not None:
        lines.append(
            f"- extra seeds: a cell whose {METRIC_NAMES.get(noisy.metric, noisy.metric)} std "
            f"over its grid seeds exceeds {noisy.std_above:g} also runs seeds "
            f"{', '.join(map(str, noisy.seeds))}"
            + (
                f"; so do the cells named in seeds_if_noisy.also ({len(noisy.also)})"
                if noisy.also
                else ""
            )
            + (
                f", and {experiment.table.baseline}'s cell in the same column whenever "
                "another row's cell does (pair_baseline)"
                if noisy.pair_baseline
                else ""
            )
        )
    incomplete = [
        f"{_cell_name(experiment, cell_keys, key)} ({s.n} of {s.expected})"
        for key, s in stats.items()
        if s.n < s.expected
    ]
    lines.append(f"- incomplete cells: {'; '.join(incomplete) if incomplete else 'none'}")
    if ignored:
        lines.append(f"- results of runs not in this grid (ignored): {len(ignored)}")
    lines.append("")

    rows, columns = axis_values(cells, len(spec.rows))
    row_head = [key_label(experiment, k) for k in spec.rows] or ["run"]
    if spec.columns:
        col_label = key_label(experiment, spec.columns)
        for metric in spec.metrics:
            lines += [f"## {METRIC_NAMES.get(metric, metric)}", ""]
            head = row_head + [f"{col_label}={c[0]}" for c in columns]
            lines += [md_row(head), md_row(["---"] * len(head))]
            for row in rows:
                values = [
                    stats[row + col].format(metric) if row + col in stats else "—"
                    for col in columns
                ]
                lines.append(md_row([*(row or ("all",)), *values]))
            lines.append("")
    else:
        head = row_head + [METRIC_NAMES.get(m, m) for m in spec.metrics]
        lines += [md_row(head), md_row(["---"] * len(head))]
        for row in rows:
            s = stats[row]
            lines.append(md_row([*(row or ("all",)), *(s.format(m) for m in spec.metrics)]))
        lines.append("")
    if spec.baseline is not None:
        lines += _baseline_section(experiment, cells, results)
    if spec.contrasts:
        lines += _contrast_section(experiment, cells, results)
    return "\n".join(lines)


def differences_by_seed(
    runs: Sequence[Run],
    other: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    metric: str,
) -> dict[int, float]:
    """``{seed: this cell's metric - the other cell's}``, in seed order, over the seeds both
    cells have a value for: the same seed trains on the same subset, so each difference
    compares two rows on identical data."""

    def by_seed(members: Sequence[Run]) -> dict[int, float]:
        out = {}
        for r in members:
            value = result_metric(results[r.name], metric) if r.name in results else None
            if value is not None:
                out[r.seed] = value
        return out

    mine, theirs = by_seed(runs), by_seed(other)
    return {s: mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys())}


def _format_difference(diffs: Sequence[float]) -> str:
    if not diffs:
        return "—"
    std = sample_std(diffs)
    higher = sum(d > 0 for d in diffs)
    return (
        f"{statistics.fmean(diffs):+.2f} ± {'n/a' if std is None else f'{std:.2f}'} "
        f"({len(diffs)}; {higher} higher)"
    )


def _baseline_section(
    experiment: Experiment,
    cells: Mapping[tuple[str, ...], Sequence[Run]],
    results: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Each row's difference from the baseline row, per column, paired by seed."""
    spec = experiment.table
    metric = spec.metrics[0]
    rows, columns = axis_values(cells, len(spec.rows))
    base_row = next(r for r in rows if ",".join(r) == spec.baseline)
    name = METRIC_NAMES.get(metric, metric)
    lines = [
        f"## {name} minus {spec.baseline}, paired by seed",
        "",
        f"Each cell: mean ± sample std of (this row's {name} − {spec.baseline}'s) over the seeds "
        "both have (same seed = same training subset), then (number of pairs; pairs where "
        "this row is higher).",
        "",
    ]
    head = [key_label(experiment, k) for k in spec.rows] + _value_heads(experiment, columns)
    lines += [md_row(head), md_row(["---"] * len(head))]
    for row in rows:
        if row == base_row:
            continue
        values = []
        for col in columns:
            if row + col in cells and base_row + col in cells:
                diffs = differences_by_seed(
                    cells[row + col], cells[base_row + col], results, metric
                )
                values.append(_format_difference(list(diffs.values())))
            else:
                values.append("—")
        lines.append(md_row([*row, *values]))
    lines.append("")
    return lines


def _value_heads(experiment: Experiment, columns: Sequence[tuple[str, ...]]) -> list[str]:
    """A paired-difference table's value headers: one per column value, or the metric's name."""
    spec = experiment.table
    if spec.columns:
        return [f"{key_label(experiment, spec.columns)}={c[0]}" for c in columns]
    return [METRIC_NAMES.get(spec.metrics[0], spec.metrics[0])]


def _contrast_section(
    experiment: Experiment,
    cells: Mapping[tuple[str, ...], Sequence[Run]],
    results: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Each ``table.contrasts`` pair (first row minus second), per column, paired by seed, with
    every pair listed: a few seeds say more one by one than as a mean and std."""
    spec = experiment.table
    metric = spec.metrics[0]
    rows, columns = axis_values(cells, len(spec.rows))
    by_label = {",".join(r): r for r in rows}
    name = METRIC_NAMES.get(metric, metric)
    lines = [
        f"## {name} contrasts, paired by seed",
        "",
        f"Each cell: mean ± sample std of (first row's {name} − second row's) over the seeds both "
        "have (same seed = same training subset), then (number of pairs; pairs where the first "
        "row is higher), then each pair as seed: difference.",
        "",
    ]
    head = ["contrast", *_value_heads(experiment, columns)]
    lines += [md_row(head), md_row(["---"] * len(head))]
    for first, second in spec.contrasts:
        values = []
        for col in columns:
            a, b = by_label[first] + col, by_label[second] + col
            diffs = (
                differences_by_seed(cells[a], cells[b], results, metric)
                if a in cells and b in cells
                else {}
            )
            listed = ", ".join(f"{seed}: {d:+.2f}" for seed, d in diffs.items())
            values.append(
                _format_difference(list(diffs.values())) + (f" — {listed}" if listed else "")
            )
        lines.append(md_row([f"{first} − {second}", *values]))
    lines.append("")
    return lines


def md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def refresh(
    experiment: Experiment,
    runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    results_dir: str | Path,
    config_file: str,
) -> None:
    """Rewrite table.md (and summary.json when the table asks for it), atomically."""
    results_dir = Path(results_dir)
    write_text(results_dir / "table.md", render_table(experiment, runs, results, config_file))
    if experiment.table.summary:
        write_json(results_dir / "summary.json", summary(experiment, runs, results))
    log.info("refreshed %s", results_dir / "table.md")
