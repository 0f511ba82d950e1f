"""``structqa experiment CONFIG --dry-run``: every planned run with its status (and its scores
when done), and the pre-training arms with theirs."""

from __future__ import annotations

from pathlib import Path

from structqa.experiments.claims import holder
from structqa.experiments.results import load_results, metric_value
from structqa.experiments.reuse import find_reusable, reuse_candidates
from structqa.experiments.run_config import resolve_config
from structqa.experiments.runner import selected
from structqa.experiments.spec import Experiment, Run, plan, pretrain_arm
from structqa.experiments.stale import selection_note, stale_arms, stale_partial, stale_results
from structqa.experiments.store import Paths, display_path, pretrain_status, read_json, run_status
from structqa.training.checkpoint import resumable


def print_plan(
    experiment: Experiment, paths: Paths, only: str | None = None, data_dir: str | None = None
) -> None:
    """The --dry-run listing: every planned run with its status (and scores when done)."""
    from rich.console import Console
    from rich.table import Table

    results = load_results(paths.results)
    runs = selected(plan(experiment, results), only)
    table = Table(title=f"{experiment.name}: {len(runs)} run(s)")
    for col in ("#", "run", "status", "F1", "EM"):
        table.add_column(col, justify="right" if col in ("#", "F1", "EM") else "left")
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
    console = Console()
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
        console.print(arms)
    console.print(table)
    console.print(
        ", ".join(f"{counts.get(s, 0)} {s}" for s in ("done", "partial", "todo"))
        + (
            f", {counts['stale']} stale (YAML changed since they started)"
            if "stale" in counts
            else ""
        )
    )
    console.print(f"outputs: {paths.runs}  results: {paths.results}")
    todo = [r for r in runs if r.name not in results]
    for line in missing_starts(experiment, todo, paths, data_dir):
        console.print(f"missing: {line}", markup=False)
    if note := selection_note(experiment):
        console.print(f"note: {note}", markup=False)


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
