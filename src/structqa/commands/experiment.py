"""``structqa experiment CONFIG.yaml``: the command line of the experiments package.

It parses and checks the options, then calls the package: the runner
(:mod:`~structqa.experiments.runner`: every unfinished run of the plan, resumably, or
``--workers`` processes sharing the grid through claims), ``--pretrain-only``
(:func:`~structqa.experiments.runner.pretrain_arms`), ``--dry-run``
(:mod:`~structqa.experiments.listing`), ``--refresh`` (:mod:`~structqa.experiments.aggregate`)
and ``--bootstrap`` (:mod:`~structqa.experiments.bootstrap`). The YAML's format is described in
:mod:`structqa.experiments.grid`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from structqa.commands.common import command
from structqa.config import ConfigError
from structqa.experiments.grid import load_experiment
from structqa.experiments.listing import print_plan
from structqa.experiments.runner import pretrain_arms, refresh_tables, run_experiment, run_workers
from structqa.experiments.store import Paths

log = logging.getLogger(__name__)


def cmd_experiment(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    if extra:
        raise ConfigError(
            f"experiment takes no config overrides ({' '.join(extra)}); set them in the "
            "YAML's base or grid"
        )
    experiment = load_experiment(args.config)
    if args.no_reuse:
        experiment = dataclasses.replace(experiment, reuse=())
    for directory in experiment.reuse:
        if not (Path(directory) / "runs").is_dir():
            log.warning(
                "%s: reuse names %s, which holds no runs/ (a path from the working directory, "
                "%s); nothing is taken from it",
                args.config,
                directory,
                Path.cwd(),
            )
    default = Paths.default(experiment)
    paths = Paths(
        Path(args.results) if args.results else default.results,
        Path(args.runs_dir) if args.runs_dir else default.runs,
    )
    if args.max_runs is not None and args.max_runs < 1:
        raise ConfigError("--max-runs must be at least 1")
    if args.workers is not None:
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.dry_run or args.refresh or args.bootstrap or args.max_runs is not None:
            raise ConfigError(
                "--workers runs the grid; it takes no --dry-run/--refresh/--bootstrap/--max-runs"
            )
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError("--threads must be at least 1")
        import torch

        torch.set_num_threads(args.threads)
    for flag, on in (("--refresh", args.refresh), ("--bootstrap", args.bootstrap)):
        if on and (args.only is not None or args.max_runs is not None):
            raise ConfigError(f"{flag} reads every result there; it takes no --only/--max-runs")
    if args.resamples < 1:
        raise ConfigError("--resamples must be at least 1")
    if args.pretrain_only and args.max_runs is not None:
        raise ConfigError("--pretrain-only fine-tunes nothing; it takes no --max-runs")
    if args.dry_run:
        print_plan(experiment, paths, args.only, args.data)
        return 0
    if args.bootstrap:
        from structqa.experiments.bootstrap import bootstrap_results

        out = bootstrap_results(
            experiment,
            paths,
            command=_command_line(args),
            data_dir=args.data,
            resamples=args.resamples,
        )
        print(out.read_text(encoding="utf-8"))
        log.info("wrote %s and bootstrap.json", out)
        return 0
    if args.refresh:
        refresh_tables(experiment, paths)
        return 0
    if args.workers is not None and args.workers > 1:
        threads = args.threads or max(1, (os.cpu_count() or 1) // args.workers)
        worker = [sys.executable, "-m", "structqa", "experiment", args.config, "--no-progress"]
        worker += _flags(args, threads)  # (--max-runs is refused with --workers)
        return run_workers(experiment, paths, worker, args.workers)
    how = {
        "command": _command_line(args),
        "only": args.only,
        "data_dir": args.data,
        "progress": not args.no_progress,
    }
    if args.pretrain_only:
        return pretrain_arms(experiment, paths, **how)
    return run_experiment(experiment, paths, max_runs=args.max_runs, **how)


_EXPERIMENT_TEXT = """run a grid of training runs from a YAML config, resumably, and tabulate
results

Runs every run of CONFIG.yaml's grid in order (skipping finished ones, resuming interrupted
ones), writing one result JSON per run and refreshing table.md.
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``experiment`` on a ``parser.add_subparsers()`` object."""
    p = command(subparsers, "experiment", _EXPERIMENT_TEXT)
    p.add_argument("config", help="experiment YAML (name, base, grid/variants, table)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list the runs with their status")
    mode.add_argument(
        "--refresh",
        action="store_true",
        help="only rewrite table.md (and summary.json) from the results there, e.g. after "
        "editing the YAML's table section",
    )
    mode.add_argument(
        "--bootstrap",
        action="store_true",
        help="compare every table row with the baseline row by a paired bootstrap over the "
        "evaluation questions (reads the runs' saved answers); writes bootstrap.md/.json",
    )
    mode.add_argument(
        "--pretrain-only",
        action="store_true",
        help="only pre-train (or continue) the pretrain: arms that the selected runs fine-tune "
        "from, and fine-tune nothing (with --workers, one arm per worker at a time)",
    )
    p.add_argument(
        "--resamples", type=int, default=10_000, help="bootstrap resamples (with --bootstrap)"
    )
    p.add_argument("--only", metavar="SUBSTRING", help="only runs whose name contains this")
    p.add_argument("--max-runs", type=int, metavar="N", help="stop after training N runs")
    p.add_argument("--results", metavar="DIR", help="default docs/results/<name>")
    p.add_argument("--runs-dir", metavar="DIR", help="run outputs; default runs/<name>")
    p.add_argument(
        "--data", metavar="DIR", help="data directory (else $STRUCTQA_DATA or ../shared/data)"
    )
    p.add_argument("--no-progress", action="store_true", help="no training progress bars")
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="train every run here, taking no finished run from the directories the YAML's "
        "`reuse:` names (to measure a table again on this machine, with --results and "
        "--runs-dir of one's own)",
    )
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for this worker (torch.set_num_threads); with several workers on "
        "one grid, e.g. one per core with --threads 1",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="run N worker processes on this grid at once (each claims the runs it trains), "
        "each with --threads or the cores split evenly; on a CPU, one per core trains more per "
        "hour than one process on all cores",
    )
    p.set_defaults(func=cmd_experiment)
    return p


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed when it came from the command line, else an equivalent one."""
    if "experiment" in sys.argv[1:]:
        return shlex.join(["structqa", *sys.argv[1:]])
    mode = []
    if getattr(args, "bootstrap", False):
        mode = ["--bootstrap", "--resamples", str(args.resamples)]
    return shlex.join(["structqa", "experiment", args.config, *mode, *_flags(args)])


def _flags(args: argparse.Namespace, threads: int | None = None) -> list[str]:
    """The options of this command that a re-run passes on (``threads`` overrides --threads)."""
    parts: list[str] = []
    for flag, value in (
        ("--only", args.only),
        ("--max-runs", args.max_runs),
        ("--results", args.results),
        ("--runs-dir", args.runs_dir),
        ("--data", args.data),
        ("--threads", args.threads if threads is None else threads),
    ):
        if value is not None:
            parts += [flag, str(value)]
    if getattr(args, "no_reuse", False):
        parts.append("--no-reuse")
    if getattr(args, "pretrain_only", False):
        parts.append("--pretrain-only")
    return parts
