"""The grid runner on the tiny checkpoint: skip/resume, interrupts, stale results, result files."""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import pytest
import yaml
from test_grid import _result, tiny_experiment
from tiny import interrupt_at_batch, tiny_finetune_base

from structqa.commands.experiment import add_parser
from structqa.config import ConfigError
from structqa.experiments import listing, runner, stale
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.results import load_results
from structqa.experiments.runner import run_experiment
from structqa.experiments.store import Paths, run_status
from structqa.training import loop

# ---- the runner on the tiny checkpoint ---------------------------------------------------


def test_runner_skips_done_runs_and_resumes_an_interrupted_one(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    first, second = exp.runs()
    assert [run_status(paths, r) for r in exp.runs()] == ["todo", "todo"]

    code = run_experiment(exp, paths, command="structqa experiment x", max_runs=1, progress=False)
    assert code == 0
    assert [run_status(paths, r) for r in exp.runs()] == ["done", "todo"]

    # interrupt the second run with a real SIGINT during its first step
    real_collate = interrupt_at_batch(monkeypatch)
    code = run_experiment(exp, paths, command="structqa experiment x", progress=False)
    assert code == runner.EXIT_INTERRUPTED
    assert run_status(paths, second) == "partial" and not paths.result(second).exists()
    state = json.loads((paths.output(second) / "last" / "train_state.json").read_text())
    assert state["global_step"] == 1 and not state["finished"]

    # continue: the finished run is skipped, the partial one resumed
    monkeypatch.setattr(loop, "collate", real_collate)
    real_run, seen = loop.run, []

    def spy(cfg, resume=False, progress=True, calibrate=None):
        seen.append((Path(cfg.train.output_dir).name, resume))
        return real_run(cfg, resume=resume, progress=progress, calibrate=calibrate)

    monkeypatch.setattr(loop, "run", spy)
    assert run_experiment(exp, paths, command="structqa experiment x", progress=False) == 0
    assert seen == [(second.name, True)]
    result = json.loads(paths.result(second).read_text())
    assert result["sessions"] == 2 and result["steps"] == 2
    assert [run_status(paths, r) for r in exp.runs()] == ["done", "done"]
    # nothing left: a further call trains nothing
    seen.clear()
    assert run_experiment(exp, paths, command="structqa experiment x", progress=False) == 0
    assert seen == []


def test_a_signal_during_a_runs_final_evaluation_stops_the_grid_after_it(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    first, second = exp.runs()
    real_inference = loop.run_inference

    def interrupt_then_infer(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # after the last step, during the evaluation
        return real_inference(*a, **kw)

    monkeypatch.setattr(loop, "run_inference", interrupt_then_infer)
    code = run_experiment(exp, paths, command="x", progress=False)
    assert code == runner.EXIT_INTERRUPTED
    assert paths.result(first).exists()  # the run finished: its result is kept
    assert run_status(paths, second) == "todo"  # and the grid went no further
    monkeypatch.setattr(loop, "run_inference", real_inference)
    assert run_experiment(exp, paths, command="x", progress=False) == 0
    assert paths.result(second).exists()


def test_results_of_a_changed_recipe_are_stale_not_mixed_in(
    tmp_path, tiny_checkpoint, shared_data, capsys
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", max_runs=1, progress=False) == 0
    # the YAML changes after seed 0 finished: its result no longer stands for the recipe
    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    base["data"]["doc_stride"] = 16
    base["train"]["lr"] = 3e-5
    changed = experiment_from_dict(
        {"name": "tiny", "base": base, "grid": {"train.seed": [0, 1]}},
        source="configs/tiny.yaml",
    )
    results = load_results(paths.results)
    assert stale.stale_results(changed, paths, results) == {
        "seed=0": ["data.doc_stride", "train.lr"]
    }
    with pytest.raises(
        ConfigError, match=r"1 finished result.*seed=0: data\.doc_stride, train\.lr"
    ):
        run_experiment(changed, paths, command="x", progress=False)
    assert not paths.result(changed.runs()[1]).exists()  # nothing trained on top
    listing.print_plan(changed, paths)
    assert "stale: data.doc_stride, train.lr" in capsys.readouterr().out
    # the unchanged YAML still runs on
    assert stale.stale_results(exp, paths, results) == {}
    # a result from before decode.whole_words decoded without it: stale only if now on
    del results["seed=0"]["config"]["decode"]["whole_words"]
    assert stale.stale_results(exp, paths, results) == {}
    whole = tiny_finetune_base(tiny_checkpoint, shared_data) | {"decode": {"whole_words": True}}
    widened = experiment_from_dict(
        {"name": "tiny", "base": whole, "grid": {"train.seed": [0, 1]}}, source="t.yaml"
    )
    assert stale.stale_results(widened, paths, results) == {"seed=0": ["decode.whole_words"]}
    # a result from when decode.verifier defaulted to false: the same recipe as "auto" where
    # every question was answerable (auto fits no verifier there), another one where some were
    # not (auto fits the similarity verifier)
    assert results["seed=0"]["config"]["decode"]["verifier"] == "auto"
    results["seed=0"]["config"]["decode"]["verifier"] = False
    assert "NoAns_total" not in results["seed=0"]["metrics"]
    assert stale.stale_results(exp, paths, results) == {}
    results["seed=0"]["metrics"]["NoAns_total"] = 10
    assert stale.stale_results(exp, paths, results) == {"seed=0": ["decode.verifier"]}
    pinned = tiny_finetune_base(tiny_checkpoint, shared_data) | {"decode": {"verifier": False}}
    off = experiment_from_dict(
        {"name": "tiny", "base": pinned, "grid": {"train.seed": [0, 1]}}, source="t.yaml"
    )
    assert stale.stale_results(off, paths, results) == {}
    results["seed=0"]["config"]["decode"]["verifier"] = "lexical"
    del results["seed=0"]["metrics"]["NoAns_total"]
    assert stale.stale_results(exp, paths, results) == {"seed=0": ["decode.verifier"]}


def test_an_unfinished_run_of_a_changed_recipe_is_stale_and_not_resumed(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch, capsys
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    first = exp.runs()[0]
    real_collate = interrupt_at_batch(monkeypatch)
    assert run_experiment(exp, paths, command="x", progress=False) == runner.EXIT_INTERRUPTED
    monkeypatch.setattr(loop, "collate", real_collate)
    assert run_status(paths, first) == "partial"
    assert stale.stale_partial(exp, paths, first) == []  # the same YAML continues it
    cadence = tiny_finetune_base(tiny_checkpoint, shared_data)
    cadence["train"]["eval_batch_size"] = 3  # a resume may change this (RESUME_MAY_CHANGE)
    looser = experiment_from_dict(
        {"name": "tiny", "base": cadence, "grid": {"train.seed": [0, 1]}}, source="t.yaml"
    )
    assert stale.stale_partial(looser, paths, first) == []

    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    base["train"]["lr"] = 3e-5
    changed = experiment_from_dict(
        {"name": "tiny", "base": base, "grid": {"train.seed": [0, 1]}},
        source="configs/tiny.yaml",
    )
    assert stale.stale_partial(changed, paths, first) == ["train.lr"]
    listing.print_plan(changed, paths)
    out = capsys.readouterr().out
    assert "stale: train.lr" in out and "1 stale" in out
    before = sorted(p.name for p in paths.output(first).rglob("*"))
    with pytest.raises(ConfigError, match=r"seed=0: its unfinished output .*train\.lr.*delete"):
        run_experiment(changed, paths, command="x", progress=False)
    assert sorted(p.name for p in paths.output(first).rglob("*")) == before  # untouched


def test_result_json_has_config_provenance_and_metrics(tmp_path, tiny_checkpoint, shared_data):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    cmd = "structqa experiment configs/tiny.yaml --max-runs 1"
    assert run_experiment(exp, paths, command=cmd, max_runs=1, progress=False) == 0
    run = exp.runs()[0]
    result = json.loads(paths.result(run).read_text())
    for key in (
        "run",
        "config",
        "seed",
        "git",
        "machine",
        "device",
        "bf16",
        "wall_time_s",
        "metrics",
        "best_epoch",
        "command",
    ):
        assert key in result, key
    assert result["run"] == "seed=0" and result["seed"] == 0 and result["command"] == cmd
    assert result["config"]["train"]["output_dir"] == str(paths.output(run))
    assert result["config"]["model"]["encoder"] == str(tiny_checkpoint)
    # an edited checkout (as while developing) also names its changed files
    dirty_keys = {"n_changed", "changed"} if result["git"]["dirty"] else set()
    assert set(result["git"]) == {"commit", "dirty", *dirty_keys}
    assert {"cpu", "cores", "torch_threads", "torch", "gpu"} <= set(result["machine"])
    assert result["device"] in ("cpu", "cuda") and result["bf16"] is False
    assert result["wall_time_s"] > 0 and result["best_epoch"] >= 1
    assert {"exact_match", "f1"} <= set(result["metrics"])
    # the local encoder it started from, by its weights (a path may be rebuilt), and its starts
    from structqa.manifest import file_sha256

    encoder = result["local_weights"]["model.encoder"]
    assert encoder["weights_sha256"] == file_sha256(tiny_checkpoint / "model.safetensors")
    assert [x["from_step"] for x in result["stints"]] == [0]
    assert result["stints"][0]["commit"] == result["git"]["commit"]
    table = (paths.results / "table.md").read_text()
    assert "structqa experiment configs/tiny.yaml" in table and "(1 of 2)" in table


def test_cli_dry_run_lists_status_and_rejects_overrides(
    tmp_path, tiny_checkpoint, shared_data, capsys
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump({"name": exp.name, "base": exp.base, "grid": {"train.seed": [0, 1, 2]}})
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    paths.output(exp.runs()[1]).mkdir(parents=True)
    (paths.output(exp.runs()[1]) / "metrics.jsonl").write_text("")
    (paths.results / "runs").mkdir(parents=True)
    paths.result(exp.runs()[0]).write_text(json.dumps({"run": "seed=0", **_result(61.5)}))

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["experiment", str(config), "--dry-run", "--results", str(paths.results)]
        + ["--runs-dir", str(paths.runs)]
    )
    assert args.func(args, []) == 0
    out = capsys.readouterr().out
    assert "seed=0" in out and "done" in out and "61.50" in out
    assert "1 done, 1 partial, 1 todo" in out
    with pytest.raises(ConfigError, match="no config overrides"):
        args.func(args, ["--train.lr=1e-3"])

    # --refresh tabulates what is there and trains nothing (seed=1 stays partial)
    args = parser.parse_args(
        ["experiment", str(config), "--refresh", "--results", str(paths.results)]
        + ["--runs-dir", str(paths.runs)]
    )
    assert args.func(args, []) == 0
    table = (paths.results / "table.md").read_text()
    assert "61.50 ± n/a (1)" in table and "runs: 1 of 3 finished" in table
    assert (paths.output(exp.runs()[1]) / "metrics.jsonl").read_text() == ""
    assert sorted(p.name for p in paths.runs.iterdir()) == [exp.runs()[1].name]
