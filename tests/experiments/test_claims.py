"""Run claims: one holder at a time, released on exit (even by SIGKILL), and the runner skips
runs another worker holds."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from tiny import tiny_finetune_base

from structqa.commands.experiment import add_parser
from structqa.config import ConfigError
from structqa.experiments import runner
from structqa.experiments.claims import claim_path, holder, try_claim
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.results import load_results
from structqa.experiments.runner import run_experiment
from structqa.experiments.spec import plan
from structqa.experiments.store import Paths, run_status


def test_a_claim_excludes_others_until_released(tmp_path):
    first = try_claim(tmp_path, "head=joint,train_size=256,seed=0")
    assert first is not None
    assert try_claim(tmp_path, "head=joint,train_size=256,seed=0") is None
    assert holder(tmp_path, "head=joint,train_size=256,seed=0")["pid"] == os.getpid()
    # other names are independent
    other = try_claim(tmp_path, "head=joint,train_size=256,seed=1")
    assert other is not None
    first.release()
    assert holder(tmp_path, "head=joint,train_size=256,seed=0") is None
    again = try_claim(tmp_path, "head=joint,train_size=256,seed=0")
    assert again is not None
    again.release()
    other.release()
    first.release()  # releasing twice is harmless


def test_names_with_slashes_stay_inside_the_claims_directory(tmp_path):
    path = claim_path(tmp_path, "pretrain/../anna")
    assert path.parent == tmp_path / ".claims" and "/" not in path.name


def test_a_killed_holder_leaves_no_stale_claim(tmp_path):
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from structqa.experiments.claims import try_claim\n"
        "c = try_claim(Path(sys.argv[1]), 'run')\n"
        "print('held' if c else 'busy', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert try_claim(tmp_path, "run") is None
        assert holder(tmp_path, "run")["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the kernel dropped the lock with the process; its pid in the file no longer counts
    deadline = time.time() + 5
    claim = try_claim(tmp_path, "run")
    while claim is None and time.time() < deadline:
        time.sleep(0.05)
        claim = try_claim(tmp_path, "run")
    assert claim is not None
    claim.release()


def _two_seeds(tiny_checkpoint, shared_data):
    """A tiny grid of two runs (seeds 0 and 1)."""
    return experiment_from_dict(
        {
            "name": "tiny",
            "base": tiny_finetune_base(tiny_checkpoint, shared_data),
            "grid": {"train.seed": [0, 1]},
        },
        source="configs/tiny.yaml",
    )


def test_runner_skips_a_run_held_by_another_worker(tmp_path, tiny_checkpoint, shared_data):
    exp = _two_seeds(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    first, second = exp.runs()
    busy = try_claim(paths.runs, first.name)
    assert busy is not None
    try:
        code = run_experiment(exp, paths, command="structqa experiment x", progress=False)
    finally:
        busy.release()
    assert code == 0
    assert [run_status(paths, r) for r in exp.runs()] == ["todo", "done"]
    # once released, the next worker trains it
    assert run_experiment(exp, paths, command="structqa experiment x", progress=False) == 0
    assert [run_status(paths, r) for r in exp.runs()] == ["done", "done"]
    locks = sorted((paths.runs / ".claims").glob("*.lock"))
    assert [p.name for p in locks] == ["seed=0.lock", "seed=1.lock"]
    assert all(p.read_text() == "" for p in locks)  # released: no holder recorded


def test_a_worker_leaves_tables_with_every_result_on_disk(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    # two workers: this one trains the first run while another holds and finishes the second,
    # whose result and tables land between this worker's reading the results and its writing
    # the tables from them
    exp = _two_seeds(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    first, second = exp.runs()
    assert run_experiment(exp, paths, command="x", only=second.name, progress=False) == 0
    other_result = paths.result(second).read_bytes()  # (what the other worker will write)
    paths.result(second).unlink()
    (paths.results / "table.md").unlink()
    other = try_claim(paths.runs, second.name)
    assert other is not None
    real_refresh, calls = runner.refresh, []

    def refresh_racing_the_other_worker(experiment, runs, results, results_dir, config):
        if not calls:  # the other worker finishes its run and refreshes, from disk
            paths.result(second).write_bytes(other_result)
            on_disk = load_results(paths.results)
            real_refresh(experiment, plan(experiment, on_disk), on_disk, results_dir, config)
        calls.append(sorted(results))
        real_refresh(experiment, runs, results, results_dir, config)  # this one's older view

    monkeypatch.setattr(runner, "refresh", refresh_racing_the_other_worker)
    try:
        assert run_experiment(exp, paths, command="x", progress=False) == 0
    finally:
        other.release()
    assert calls[0] == [first.name]  # the older view was written after the other's tables
    assert "- runs: 2 of 2 finished" in (paths.results / "table.md").read_text()


def test_workers_flag_runs_every_run_exactly_once(tmp_path, tiny_checkpoint, shared_data):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "base": tiny_finetune_base(tiny_checkpoint, shared_data),
                "grid": {"train.seed": [0, 1, 2]},
            }
        )
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["experiment", str(config), "--workers", "2", "--threads", "1"]
        + ["--results", str(paths.results), "--runs-dir", str(paths.runs)]
    )
    assert args.func(args, []) == 0
    results = [json.loads(p.read_text()) for p in sorted((paths.results / "runs").glob("*.json"))]
    assert [r["run"] for r in results] == ["seed=0", "seed=1", "seed=2"]
    # each trained once, in one session, by a one-thread worker
    assert all(r["sessions"] == 1 and r["machine"]["torch_threads"] == 1 for r in results)
    assert "runs: 3 of 3 finished" in (paths.results / "table.md").read_text()
    with pytest.raises(ConfigError, match="--workers runs the grid"):
        args.func(parser.parse_args(["experiment", str(config), "--workers", "2", "--dry-run"]), [])
