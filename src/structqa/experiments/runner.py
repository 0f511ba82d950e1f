"""The runner: every unfinished run of an experiment's plan, one after another, resumably.

Each run trains into ``<runs-dir>/<run>/`` and, once finished, leaves one result JSON in
``<results>/runs/<run>.json`` (:mod:`structqa.experiments.execute`); then the tables are
refreshed. A run with a result is skipped; a run with an output directory but no result is
resumed. Several workers may run the same experiment at once (e.g. one per core, with
``--threads``): each claims a run before training it (:mod:`structqa.experiments.claims`) and
skips runs another worker holds; :func:`run_workers` starts such workers as child processes.
SIGINT/SIGTERM stop the current run cleanly (the trainer saves ``last/``) and the runner exits
without a result for it; the same command continues later.
"""

from __future__ import annotations

import logging
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from structqa.config import ConfigError
from structqa.experiments.aggregate import refresh
from structqa.experiments.arms import ensure_pretrained
from structqa.experiments.claims import RunBusy, held_by, tables_lock, try_claim
from structqa.experiments.execute import execute_run
from structqa.experiments.results import load_results
from structqa.experiments.reuse import find_reusable, reuse_result
from structqa.experiments.run_config import resolve_config
from structqa.experiments.spec import Experiment, Run, plan, pretrain_arm
from structqa.experiments.stale import check_not_stale, selection_note
from structqa.experiments.store import (
    ANSWERS_DIR,
    Launch,
    Paths,
    config_file,
    keep_answers,
    run_status,
)
from structqa.provenance import git_info, machine_info
from structqa.training import loop

log = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130
#: seconds between looks at a busy arm's claim, once a worker has nothing else to run
ARM_WAIT_POLL_S = 10.0


def selected(runs: Sequence[Run], only: str | None) -> list[Run]:
    """The runs whose name contains ``only`` (all when None); text that matches no run is an
    error naming a few of the runs, not a silent no-op."""
    picked = [r for r in runs if not only or only in r.name]
    if only and not picked:
        names = ", ".join(r.name for r in runs[:3])
        raise ConfigError(f"--only {only!r} matches no run of the grid (runs look like {names})")
    return picked


def run_experiment(
    experiment: Experiment,
    paths: Paths,
    *,
    command: str,
    only: str | None = None,
    max_runs: int | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> int:
    """Run every unfinished run of the plan in order; 0 when done or stopped by --max-runs,
    130 when interrupted. The plan is recomputed after each run, so the extra seeds of a noisy
    cell join the queue as soon as that cell's grid seeds are in. A run claimed by another
    worker (another ``structqa experiment`` on the same runs directory) is skipped. A run whose
    pre-training arm another worker is training is put off: once nothing else is left, the
    worker waits for that arm's claim and then fine-tunes from it (or, if its holder stopped
    before finishing, resumes the arm itself). However it leaves, the worker rewrites the
    tables from every result on disk as its last act (:func:`_refresh_from_disk`)."""
    check_not_stale(experiment, paths, load_results(paths.results))
    if note := selection_note(experiment):
        log.warning("%s", note)
    loop.StopFlag.received = None  # (a signal an earlier call in this process handled)
    launch = Launch(command, {"git": git_info(), "machine": machine_info()}, data_dir, progress)
    try:
        code = _work_through(experiment, paths, launch, only, max_runs, data_dir)
    except BaseException:
        with suppress(Exception):  # (the error that stopped the worker is the one to see)
            _refresh_from_disk(experiment, paths)
        raise
    # every worker (started by hand too, not only by --workers) rewrites the tables from disk
    # as it leaves: the last word on them is then always a complete view
    _refresh_from_disk(experiment, paths)
    return code


def _refresh_from_disk(experiment: Experiment, paths: Paths) -> None:
    """Rewrite the tables from every result on disk (if there is any), reading the results and
    writing the tables under the tables' lock: two workers refreshing at once then write one
    after the other, the later from a view that includes everything the earlier saw."""
    if not (paths.results / "runs").is_dir():
        return
    with tables_lock(paths.results):
        results = load_results(paths.results)
        if results:
            refresh(
                experiment,
                plan(experiment, results),
                results,
                paths.results,
                config_file(experiment),
            )


def _work_through(
    experiment: Experiment,
    paths: Paths,
    launch: Launch,
    only: str | None,
    max_runs: int | None,
    data_dir: str | None,
) -> int:
    """:func:`run_experiment`'s queue: train, reuse or skip each unfinished run of the plan,
    refreshing the tables after each result; its exit status."""
    finished = trained = 0  # trained: --max-runs counts runs trained, not results reused
    skipped: list[str] = []
    tried: set[str] = set()
    waiting: dict[str, list[str]] = {}  # a busy arm's claim -> the runs put off until it is free
    try:
        with _sigterm_as_interrupt():
            while True:
                results = load_results(paths.results)
                runs = plan(experiment, results)
                todo = [
                    r for r in selected(runs, only) if r.name not in results and r.name not in tried
                ]
                if not todo and waiting:
                    _wait_for_claims(paths, waiting)
                    tried.difference_update(*waiting.values())
                    waiting.clear()
                    continue
                if not todo:
                    break
                if max_runs is not None and trained >= max_runs:
                    log.info("stopping after %d run(s) (--max-runs); %d left", trained, len(todo))
                    break
                run = todo[0]
                tried.add(run.name)
                claim = try_claim(paths.runs, run.name)
                if claim is None:
                    log.info(
                        "%s is being trained by %s; skipping it",
                        run.name,
                        held_by(paths.runs, run.name),
                    )
                    skipped.append(run.name)
                    continue
                with claim:
                    if paths.result(run).exists():  # another worker finished it since the plan
                        continue
                    source = (
                        find_reusable(
                            experiment, resolve_config(experiment, run, paths, data_dir)[0]
                        )
                        if experiment.reuse
                        else None
                    )
                    if source is not None:
                        reuse_result(experiment, run, paths, *source)
                        finished += 1
                        _refresh_from_disk(experiment, paths)
                        continue
                    left = len(todo)
                    log.info(
                        "run %s (%s; %d left in this selection)",
                        run.name,
                        run_status(paths, run),
                        left,
                    )
                    try:
                        done = execute_run(experiment, run, paths, launch)
                    except RunBusy as busy:
                        log.info("%s: %s; putting it off", run.name, busy)
                        waiting.setdefault(busy.claim, []).append(run.name)
                        continue
                if not done:
                    log.warning(
                        "%s stopped before finishing; run the same command to continue", run.name
                    )
                    return EXIT_INTERRUPTED
                finished += 1
                trained += 1
                _refresh_from_disk(experiment, paths)
                if loop.StopFlag.received is not None:
                    # the signal came during the run's last step or final evaluation: the run
                    # finished and its result is saved, but the grid stops here as asked
                    loop.StopFlag.received = None
                    log.warning("%s finished; stopping as signalled", run.name)
                    return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log.warning("interrupted; run the same command to continue")
        return EXIT_INTERRUPTED
    results = load_results(paths.results)
    if results:
        kept = keep_answers(experiment, plan(experiment, results), results, paths)
        if kept:
            log.info("saved the answers of %d earlier run(s) in %s", kept, paths.results)
    log.info("%d run(s) finished by this command; results in %s", finished, paths.results)
    if skipped:
        log.info(
            "%d run(s) skipped because another worker held them: %s",
            len(skipped),
            ", ".join(skipped),
        )
    return 0


def refresh_tables(experiment: Experiment, paths: Paths) -> None:
    """``--refresh``: rewrite the tables from every result in ``paths.results`` (which must
    still stand for the YAML's recipe), and keep the answers of runs that lack them there.
    Read and written under the tables' lock, as a worker's refresh is."""
    if not load_results(paths.results):  # (checked first: the lock would create the folder)
        raise ConfigError(f"--refresh: no results in {paths.results} to tabulate")
    with tables_lock(paths.results):
        results = load_results(paths.results)
        check_not_stale(experiment, paths, results)
        runs = plan(experiment, results)
        refresh(experiment, runs, results, paths.results, config_file(experiment))
    log.info("rewrote the tables in %s from %d result(s)", paths.results, len(results))
    kept = keep_answers(experiment, runs, results, paths)
    if kept:
        log.info("saved the answers of %d run(s) in %s/%s", kept, paths.results, ANSWERS_DIR)


def _wait_for_claims(paths: Paths, waiting: Mapping[str, Sequence[str]]) -> None:
    """Block until no other worker holds any of ``waiting``'s claims (a worker holds an arm's
    claim while it trains the arm; the claim goes with the worker if it dies)."""
    for name, runs in waiting.items():
        log.info(
            "waiting for %s (held by %s) before its %d run(s): %s",
            name,
            held_by(paths.runs, name),
            len(runs),
            ", ".join(runs),
        )
        while (claim := try_claim(paths.runs, name)) is None:
            time.sleep(ARM_WAIT_POLL_S)
        claim.release()


def pretrain_arms(
    experiment: Experiment,
    paths: Paths,
    *,
    command: str,
    only: str | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> int:
    """``--pretrain-only``: pre-train (or continue) every arm that a selected run fine-tunes
    from, in plan order, and fine-tune nothing; 0 when done, 130 when interrupted. An arm
    another worker holds is skipped, as the grid skips a claimed run."""
    if experiment.pretrain is None:
        raise ConfigError(
            f"{experiment.name}: --pretrain-only, but the YAML has no pretrain section"
        )
    results = load_results(paths.results)
    check_not_stale(experiment, paths, results)
    runs = selected(plan(experiment, results), only)
    arms: list[str] = []
    for run in runs:
        cfg = resolve_config(experiment, run, paths, data_dir)[0]
        arm = pretrain_arm(str(getattr(cfg.model, "encoder", "")))
        if arm is not None and arm not in arms:
            arms.append(arm)
    if not arms:
        where = f" whose name contains {only!r}" if only else ""
        raise ConfigError(
            f"{experiment.name}: no run{where} fine-tunes from a pre-training arm "
            f"(arms: {', '.join(experiment.pretrain.arms)})"
        )
    launch = Launch(command, {"git": git_info(), "machine": machine_info()}, data_dir, progress)
    loop.StopFlag.received = None
    done, skipped = 0, []
    try:
        with _sigterm_as_interrupt():
            for arm in arms:
                try:
                    final = ensure_pretrained(experiment, arm, paths, launch)
                except RunBusy as busy:
                    log.info("%s; skipping it", busy)
                    skipped.append(arm)
                    continue
                if final is None:
                    log.warning(
                        "pre-training arm %s stopped before finishing; run the same command "
                        "to continue",
                        arm,
                    )
                    return EXIT_INTERRUPTED
                done += 1
                if loop.StopFlag.received is not None:
                    loop.StopFlag.received = None
                    log.warning("pre-training arm %s finished; stopping as signalled", arm)
                    return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log.warning("interrupted; run the same command to continue")
        return EXIT_INTERRUPTED
    _refresh_from_disk(experiment, paths)  # table.md lists the arms' status
    log.info(
        "%d pre-training arm(s) ready: %s", done, ", ".join(a for a in arms if a not in skipped)
    )
    if skipped:
        log.info("skipped, held by another worker: %s", ", ".join(skipped))
    return 0


def run_workers(
    experiment: Experiment, paths: Paths, worker_command: Sequence[str], workers: int
) -> int:
    """``--workers N``: N child processes each run ``worker_command`` (this same experiment, one
    worker each; claims keep them apart); then the tables are refreshed once with every result.
    SIGTERM/SIGINT reach every worker, and each stops resumably. Exit status 130 if any worker
    was interrupted, else the highest status of a worker."""
    log.info("starting %d workers: %s", workers, shlex.join(worker_command))
    children: list[subprocess.Popen] = []

    def forward(signum: int, frame: Any) -> None:  # noqa: ARG001
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for i in range(workers):
            children.append(subprocess.Popen(list(worker_command)))
            if i + 1 < workers:
                time.sleep(1.0)  # (claims make this unnecessary; it only tidies the log)
        codes = [child.wait() for child in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _refresh_from_disk(experiment, paths)
    log.info("workers finished with status %s", ", ".join(map(str, codes)))
    if EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return max(codes)


def _raise_interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside (as SIGINT does), so a killed worker stops
    resumably; outside the main thread signals are left to the trainer."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
