"""``structqa experiment CONFIG --dry-run``: every planned run with its status (and its scores
when done), and the pre-training arms with theirs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from structqa.experiments.claims import holder
from structqa.experiments.results import load_results, metric_value
from structqa.experiments.reuse import find_reusable, reuse_candidates
from structqa.experiments.run_config import resolve_config
from structqa.experiments.runner import selected
from structqa.experiments.spec import Experiment, Run, plan, pretrain_arm
from structqa.experiments.stale import selection_note, stale_arms, stale_partial, stale_results
from structqa.experiments.store import (
    ANSWERS_DIR,
    Paths,
    answers_source,
    display_path,
    kept_answers,
    pretrain_status,
    read_json,
    run_status,
)
from structqa.training.checkpoint import resumable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def print_plan(
    experiment: Experiment, paths: Paths, only: str | None = None, data_dir: str | None = None
) -> None:
    """The --dry-run listing: every planned run with its status (and scores when done)."""
    from rich.table import Table

    results = load_results(paths.results)
    runs = selected(plan(experiment, results), only)
    table = Table(title=f"{experiment.name}: {len(runs)} run(s)")
    for col in ("#", "run", "status", "F1", "EM"):
        # a run's name (and a status naming a path) folds onto more lines, never cut
        justify = "right" if col in ("#", "F1", "EM") else "left"
        table.add_column(col, justify=justify, overflow="fold" if col in WHOLE else "ellipsis")
    counts: dict[str, int] = {}
    candidates = reuse_candidates(experiment)  # (read once for the whole listing)
    changed_arms = stale_arms(experiment, paths)
    stale = stale_results(experiment, paths, results, changed_arms)
    for i, run in enumerate(runs, 1):
        status = run_status(paths, run)
        if run.name in stale:
            status = "stale"
        elif status == "partial" and (changed := stale_partial(experiment, paths, run)):
            stale[run.name] = changed
            status = "stale"
        counts[status] = counts.get(status, 0) + 1
        if status == "stale":
            status = f"stale: {', '.join(stale[run.name])}"
        elif status != "done" and (record := holder(paths.runs, run.name)) is not None:
            status = f"running (pid {record['pid']})"
        elif (
            status != "done"
            and experiment.reuse
            and (
                source := find_reusable(
                    experiment, resolve_config(experiment, run, paths)[0], candidates
                )
            )
        ):
            status += f" (will reuse {display_path(source[0])})"
        elif status == "done" and results.get(run.name, {}).get("reused_from"):
            status = "done (reused)"
        scores = ["", ""]
        if run.name in results:
            m = results[run.name]["metrics"]
            scores = [f"{metric_value(m, 'f1'):.2f}", f"{metric_value(m, 'em'):.2f}"]
        name = run.name + (" (extra seed)" if run.extra else "")
        table.add_row(str(i), name, status, *scores)
    tables = [table]
    if experiment.pretrain is not None:
        arms = Table(
            title=f"{experiment.name}: {len(experiment.pretrain.arms)} pre-training arm(s)"
        )
        for col in ("arm", "status", "MLM acc", "MLM loss"):
            arms.add_column(col, justify="right" if col.startswith("MLM") else "left")
        for arm in experiment.pretrain.arms:
            m = read_json(paths.pretrain_result(arm)).get("metrics", {})
            acc, loss = m.get("mlm_accuracy"), m.get("mlm_loss")
            arms.add_row(
                arm,
                f"stale: {', '.join(changed_arms[arm])}"
                if arm in changed_arms
                else pretrain_status(paths, arm),
                "" if acc is None else f"{100 * acc:.2f}",
                "" if loss is None else f"{loss:.4f}",
            )
        tables.insert(0, arms)
    console = _console(tables)
    for shown in tables:
        console.print(shown)
    console.print(
        ", ".join(f"{counts.get(s, 0)} {s}" for s in ("done", "partial", "todo"))
        + (
            f", {counts['stale']} stale (YAML changed since they started)"
            if "stale" in counts
            else ""
        )
    )
    console.print(f"outputs: {paths.runs}  results: {paths.results}")
    if line := unkept_answers(experiment, runs, paths, results):
        console.print(f"answers: {line}", markup=False)
    todo = [r for r in runs if r.name not in results]
    for line in missing_starts(experiment, todo, paths, data_dir):
        console.print(f"missing: {line}", markup=False)
    if note := selection_note(experiment):
        console.print(f"note: {note}", markup=False)


#: the listing's columns whose text is folded onto more lines rather than cut short
WHOLE = ("run", "status")


UNBOUNDED = 100_000  # columns: what a table is measured in when nothing limits it


def _console(tables: Sequence[Table]) -> Console:
    """The console the listing prints to: the terminal's; when the output goes to a pipe or
    a file (80 columns otherwise), one wide enough for each row to stay on one line, so that
    `| grep NAME` finds the whole name."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console
    unbounded = console.options.update(max_width=UNBOUNDED)
    widest = max(console.measure(t, options=unbounded).maximum for t in tables)
    return Console(width=max(console.width, widest))


def unkept_answers(
    experiment: Experiment,
    runs: list[Run],
    paths: Paths,
    results: Mapping[str, Mapping[str, Any]],
) -> str:
    """How many of the finished ``runs`` have no answers kept beside their results
    (``answers/<run>.json.gz``; a reused result: those of the experiment that trained it), and
    how many of those still have them in their output directory; '' when every one has its
    answers kept. ``structqa compare`` and ``--bootstrap`` score only kept or still present
    answers: a table made before answers were kept cannot be recomputed question by question."""
    done = [r for r in runs if r.name in results]
    unkept, in_output = 0, 0
    for run in done:
        result = results[run.name]
        if kept_answers(paths.results, run.name, result).is_file():
            continue
        unkept += 1
        config = result.get("config") or {}  # (a result written by hand has none)
        reused = result.get("reused_from")
        output = (config.get("train") or {}).get("output_dir") if reused else None
        out = Path(output) if output else paths.output(run)  # (what --bootstrap reads)
        in_output += answers_source(experiment.kind, out, config.get("data") or {}).is_file()
    if not unkept:
        return ""
    text = (
        f"{unkept} of {len(done)} finished run(s) have no answers kept "
        f"({ANSWERS_DIR}/<run>.json.gz beside their results: runs finished before answers "
        "were kept have none)"
    )
    if in_output:
        text += (
            f"; {in_output} of them still have theirs in the output directory that trained "
            "them, which `--bootstrap` reads (and `--refresh` keeps, for runs trained here)"
        )
    lost = unkept - in_output
    if lost:
        text += (
            f"; `structqa compare` and `--bootstrap` cannot score {lost} of them again: "
            "to have a run's answers kept, move its result aside and run it again"
        )
    return text


def missing_starts(
    experiment: Experiment, runs: list[Run], paths: Paths, data_dir: str | None = None
) -> list[str]:
    """The encoders and ``model.init`` checkpoints that runs still to train start from and
    that are not there (a pre-training arm's is the runner's to make), and the corpora of the
    unfinished pre-training arms they fine-tune from: said up front, where the run would
    otherwise fail only when its turn comes, hours into the grid."""
    from structqa.models.build import resolve_encoder_path

    wanted: dict[str, list[str]] = {}
    arms: dict[str, list[str]] = {}  # unfinished arm -> the runs that start from it
    for run in runs:
        if resumable(paths.output(run) / "last"):  # it goes on from its own checkpoint
            continue
        model = experiment.config_for(run).model
        encoder = str(getattr(model, "encoder", "") or "")
        init = getattr(model, "init", None)  # (drop-train: the encoder is then not read)
        arm = pretrain_arm(encoder)
        if arm is not None and init is None and pretrain_status(paths, arm) != "done":
            arms.setdefault(arm, []).append(run.name)
        if encoder and init is None and arm is None:
            try:
                resolve_encoder_path(encoder)
            except (FileNotFoundError, OSError):
                wanted.setdefault(f"model.encoder {encoder}", []).append(run.name)
        starts = [("model.init", init), ("model.init_from", getattr(model, "init_from", None))]
        for key, start in starts:
            if start and start != "reader" and not Path(str(start)).expanduser().is_dir():
                wanted.setdefault(f"{key} {start}", []).append(run.name)
    lines = [
        f"{what}, which {len(names)} run(s) to train start from (first: {names[0]}); make it "
        "first (e.g. the `structqa pretrain` or `drop-train` command its config names), or "
        "fix the path"
        for what, names in wanted.items()
    ]
    return lines + missing_corpora(experiment, arms, data_dir)


def missing_corpora(
    experiment: Experiment, arms: dict[str, list[str]], data_dir: str | None = None
) -> list[str]:
    """The ``data.corpus`` of each of ``arms`` (arm -> the runs that start from it) that is
    neither where it is given nor under the data directory (``data_dir``, the command's
    ``--data``, as pre-training reads it; else the arm's own), one line per corpus."""
    from structqa.pretrain.data import resolve_corpus

    if experiment.pretrain is None:  # (a grid refuses pretrain:ARM without it)
        return []
    wanted: dict[str, tuple[list[str], list[str]]] = {}  # corpus -> (arms, runs)
    for arm, names in arms.items():
        cfg = experiment.pretrain.config_for(arm)
        if data_dir:
            cfg.data.dir = data_dir
        try:
            resolve_corpus(cfg)
        except (FileNotFoundError, NotADirectoryError):
            those_arms, those_runs = wanted.setdefault(cfg.data.corpus, ([], []))
            those_arms.append(arm)
            those_runs.extend(names)
    return [
        f"data.corpus {corpus} of pre-training arm(s) {', '.join(those_arms)}, which "
        f"{len(names)} run(s) to train start from (first: {names[0]}); build it first with "
        "`structqa corpus --out`, or fix the arm's data.corpus"
        for corpus, (those_arms, names) in wanted.items()
    ]
