"""scripts/squad2_heldout.py keeps the held-out rows of runs whose checkpoints are not on this
machine, instead of rewriting the summary without them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tiny import load_script

GRID = Path(__file__).resolve().parents[2] / "configs" / "squad2" / "grid.yaml"


def _result(run: str, seed: int) -> dict:
    return {
        "experiment": "squad2-grid",
        "run": run,
        "seed": seed,
        "config": {"model": {"head": "dyrex", "null_head": "span"}, "data": {"train_size": 1024}},
    }


def _row(run: str, seed: int, f1: float) -> dict:
    keys = ("exact", "HasAns_f1", "NoAns_f1", "NoAns_auc", "forced_HasAns_f1")
    metrics = {k: 50.0 for k in keys} | {"f1": f1, "null_threshold": 0.0}
    metrics |= {"ece": 0.04, "ece_uncalibrated": 0.4}
    return {
        "experiment": "squad2-grid",
        "run": run,
        "seed": seed,
        "head": "dyrex",
        "null_head": "span",
        "train_size": "1024",
        "metrics": metrics,
    }


def test_runs_without_a_checkpoint_here_keep_their_earlier_rows(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    script = load_script("squad2_heldout")
    results, runs, out = tmp_path / "results", tmp_path / "runs", tmp_path / "out"
    (results / "squad2-grid" / "runs").mkdir(parents=True)
    names = [f"variant=dyrex,train_size=1024,seed={s}" for s in (0, 1)]
    for seed, name in enumerate(names):
        path = results / "squad2-grid" / "runs" / f"{name}.json"
        path.write_text(json.dumps(_result(name, seed)))
    out.mkdir()
    # seed 0 was scored before; seed 1 never was, and neither checkpoint is here
    (out / "heldout.json").write_text(json.dumps([_row(names[0], 0, 55.0)]))
    argv = [str(GRID), "--out", str(out), "--results", str(results), "--runs", str(runs)]
    assert script.main(argv) == 0
    rows = json.loads((out / "heldout.json").read_text())
    assert [r["run"] for r in rows] == [names[0]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dyrex"]["1024"]["f1_mean"] == 55.0 and summary["dyrex"]["1024"]["seeds"] == [0]
    assert "no checkpoint" in caplog.text and "kept from" in caplog.text


def test_only_keeps_the_named_variant_out_of_a_shared_cell(tmp_path):
    script = load_script("squad2_heldout")
    results, runs, out = tmp_path / "results", tmp_path / "runs", tmp_path / "out"
    (results / "squad2-grid" / "runs").mkdir(parents=True)
    names = ["variant=dyrex,train_size=1024,seed=0", "variant=independent,train_size=1024,seed=0"]
    for name in names:
        path = results / "squad2-grid" / "runs" / f"{name}.json"
        path.write_text(json.dumps(_result(name, 0)))
    out.mkdir()
    (out / "heldout.json").write_text(
        json.dumps([_row(names[0], 0, 55.0), _row(names[1], 0, 40.0)])
    )
    argv = [str(GRID), "--out", str(out), "--results", str(results), "--runs", str(runs)]
    assert script.main([*argv, "--only", "variant=dyrex"]) == 0
    rows = json.loads((out / "heldout.json").read_text())
    assert [r["run"] for r in rows] == [names[0]]
    assert json.loads((out / "summary.json").read_text())["dyrex"]["1024"]["f1_mean"] == 55.0
