"""Experiment grids: expansion and validation, extra seeds for noisy cells, the runner's
skip/resume/result files (on the tiny checkpoint), and the validation-split files."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny import interrupt_at_batch, tiny_finetune_base

from structqa.commands.experiment import add_parser
from structqa.config import ConfigError
from structqa.data import read_examples
from structqa.experiments import bootstrap, listing, runner, stale
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.results import load_results
from structqa.experiments.run_config import resolve_config, validation_files
from structqa.experiments.runner import run_experiment
from structqa.experiments.spec import ValidationSpec, plan
from structqa.experiments.store import Paths, run_status
from structqa.prediction.scoring import evaluate_checkpoint
from structqa.training import loop

MINI = "fixtures/squad-v1.1-mini.json"
POOL = "splits/squad1-train.mrqa.jsonl.gz"


def spec(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "base": {"train": {"lr": 1e-4}}, **extra}


# ---- expansion -------------------------------------------------------------------------


def test_product_axes_expand_in_file_order_with_stable_names():
    exp = experiment_from_dict(
        spec(
            grid={
                "model.head": ["independent", "joint"],
                "data.train_size": [256, 512],
                "train.seed": [0, 1],
            },
            table={"rows": ["model.head"], "columns": "data.train_size"},
        )
    )
    names = [r.name for r in exp.runs()]
    # seed by seed (every cell once, then again), the other axes in file order
    assert names[:5] == [
        "head=independent,train_size=256,seed=0",
        "head=independent,train_size=512,seed=0",
        "head=joint,train_size=256,seed=0",
        "head=joint,train_size=512,seed=0",
        "head=independent,train_size=256,seed=1",
    ]
    assert names[-1] == "head=joint,train_size=512,seed=1"
    assert len(names) == len(set(names)) == 8
    assert names == [r.name for r in exp.runs()]  # deterministic
    run = exp.runs()[6]  # joint, 256, seed 1
    cfg = exp.config_for(run)
    assert (cfg.model.head, cfg.data.train_size, cfg.train.seed, cfg.train.lr) == (
        "joint",
        "256",
        1,
        1e-4,
    )
    assert run.seed == 1 and run.values == {
        "model.head": "joint",
        "data.train_size": "256",
        "train.seed": 1,
    }


def test_variants_are_outermost_within_a_seed_and_values_are_coerced_into_names():
    exp = experiment_from_dict(
        spec(
            variants=[
                {"name": "static", "model.head": "independent"},
                {"name": "fast", "model": {"head": "joint"}, "train.lr": "3e-5"},
            ],
            grid={"train.head_lr": [None, 1e-3], "train.seed": [0, 1]},
            table={"rows": ["variant", "train.head_lr"]},
        )
    )
    names = [r.name for r in exp.runs()]
    assert names[0] == "variant=static,head_lr=null,seed=0"
    assert names[2] == "variant=fast,head_lr=null,seed=0"
    assert names[4] == "variant=static,head_lr=null,seed=1"
    assert names[-1] == "variant=fast,head_lr=0.001,seed=1"
    cfg = exp.config_for(exp.runs()[-1])
    assert cfg.model.head == "joint" and cfg.train.lr == 3e-5 and cfg.train.head_lr == 1e-3
    assert exp.config_for(exp.runs()[0]).train.lr == 1e-4  # the base where no variant sets it


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (spec(base={"model": {"haed": "joint"}}), "'head'"),
        (spec(base={"trian": {}}), "'train'"),
        (spec(grid={"train.lrr": [1e-4]}), "'lr'"),
        (spec(grid={"modle.head": ["joint"]}), "'model'"),
        (spec(gird={"train.seed": [0]}), "'grid'"),
        (spec(variants=[{"name": "a", "train.seeed": 1}]), "'seed'"),
        (spec(grid={"train.seed": [0]}, table={"rows": ["train.sed"]}), None),
        (spec(grid={"train.seed": [0]}, table={"rowz": []}), "'rows'"),
    ],
)
def test_unknown_keys_are_errors_naming_the_closest_key(data, named):
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(data, source="x.yaml")
    assert "x.yaml" in str(err.value)
    if named:
        assert f"did you mean {named}" in str(err.value), err.value


@pytest.mark.parametrize(
    "data",
    [
        spec(grid={"train.seed": ["zero"]}),  # wrong type
        spec(grid={"train.seed": []}),  # empty axis
        spec(grid={"train.seed": [1, 1]}),  # repeated value
        spec(grid={"train.output_dir": ["a", "b"]}),  # the runner's job
        spec(grid={"model.head": ["a", "b"], "train.seed": [0]}, table={"rows": []}),
        spec(variants=[{"name": "a/b", "train.lr": 1e-3}]),
        spec(grid={"train.lr": [1e-3]}, variants=[{"name": "a", "train.lr": 1e-4}]),
        spec(grid={"train.seed": [0, 1]}, seeds_if_noisy={"std_above": 2, "seeds": [1, 2]}),
        spec(
            grid={"train.seed": [0]}, seeds_if_noisy={"std_above": 2, "seeds": [1], "metric": "f"}
        ),
        spec(validation={"fraction": 1.5}),
    ],
)
def test_invalid_experiments_are_rejected(data):
    with pytest.raises(ConfigError):
        experiment_from_dict(data)


def test_mapping_valued_keys_are_one_value_in_variants_grids_and_names():
    exp = experiment_from_dict(
        spec(
            variants=[
                {"name": "w5", "train": {"param_lr": {"head.scorer.W": 1e-5}}},
                {"name": "w0", "train.param_lr": {"head.scorer.W": 0}},
            ]
        )
    )
    got = {r.name: exp.config_for(r).train.param_lr for r in exp.runs()}
    assert got == {"variant=w5": {"head.scorer.W": 1e-5}, "variant=w0": {"head.scorer.W": 0.0}}
    grid = experiment_from_dict(spec(grid={"train.param_lr": [{"head.scorer.W": 1e-5}, {}]}))
    names = [r.name for r in grid.runs()]
    assert names == ["param_lr=head.scorer.W:1e-05", "param_lr={}"]
    assert grid.config_for(grid.runs()[0]).train.param_lr == {"head.scorer.W": 1e-5}


def test_lowdata_configs_expand_to_the_planned_grids():
    root = Path(__file__).resolve().parents[2] / "configs" / "lowdata"
    recipe = load_experiment(root / "recipe.yaml")
    assert len(recipe.runs()) == 2 * 2 * 3 and recipe.validation == ValidationSpec(0.2, 1234)
    assert recipe.runs()[0].name == "lr=3e-05,head_lr=null,seed=0"
    heads = load_experiment(root / "heads.yaml")
    assert len(heads.runs()) == 6 * 3 * 3
    assert heads.table.summary and heads.seeds_if_noisy.seeds == (3, 4)
    masks = load_experiment(root / "masks.yaml")
    assert len(masks.runs()) == 8 * 3 and masks.table.rows == ("variant",)
    # both grids train with the recipe study's winner, the same for every head and mask
    recipe_keys = ("lr", "head_lr", "epochs", "batch_size", "warmup_ratio", "eval_every_epoch")
    trains = [exp.config_for(r).train for exp in (heads, masks) for r in exp.runs()]
    assert {tuple(getattr(t, k) for k in recipe_keys) for t in trains} == {
        (1e-4, 1e-3, 10.0, 12, 0.1, False)
    }


def test_lowdata_heads_grid_trains_joints_bilinear_form_at_the_encoder_rate():
    from structqa.models.build import build_model
    from structqa.training.optim import build_optimizer

    heads = load_experiment(Path(__file__).resolve().parents[2] / "configs/lowdata/heads.yaml")
    for head in ("joint", "dyrex+joint", "dyref+joint", "dyrex"):
        run = next(r for r in heads.runs() if r.overrides["model.head"] == head)
        cfg = heads.config_for(run)
        model, _ = build_model(cfg)
        tc = cfg.train
        opt = build_optimizer(model, tc.lr, tc.head_lr, tc.weight_decay, tc.head_lr_exclude)
        rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        params = dict(model.named_parameters())
        assert rate[id(params["head.queries.q0"])] == 1e-3
        if "joint" in head:
            assert rate[id(params["head.scorer.W"])] == 1e-4
        else:
            assert not any(rate[id(p)] == 1e-4 for n, p in params.items() if n.startswith("head."))


# ---- extra seeds for noisy cells ---------------------------------------------------------


def _result(f1: float) -> dict[str, Any]:
    return {"metrics": {"f1": f1, "exact_match": f1 - 10}}


def test_noisy_cells_get_extra_seeds_after_their_grid_seeds_finish():
    exp = experiment_from_dict(
        spec(
            grid={"model.encoder": ["a", "b", "c"], "train.seed": [0, 1, 2]},
            table={"rows": ["model.encoder"]},
            seeds_if_noisy={"std_above": 2.0, "seeds": [3, 4]},
        )
    )
    finished = {
        # a: std 1.0 (quiet); b: std 5.0 (noisy); c: noisy but seed 2 is missing
        "encoder=a,seed=0": _result(50),
        "encoder=a,seed=1": _result(51),
        "encoder=a,seed=2": _result(52),
        "encoder=b,seed=0": _result(40),
        "encoder=b,seed=1": _result(45),
        "encoder=b,seed=2": _result(50),
        "encoder=c,seed=0": _result(10),
        "encoder=c,seed=1": _result(60),
    }
    runs = plan(exp, finished)
    assert [r.name for r in runs[:9]] == [r.name for r in exp.runs()]
    assert [r.name for r in runs[9:]] == ["encoder=b,seed=3", "encoder=b,seed=4"]
    assert all(r.extra for r in runs[9:]) and [r.seed for r in runs[9:]] == [3, 4]
    assert exp.config_for(runs[-1]).train.seed == 4
    # the rule looks at the grid seeds only: quiet extra seeds do not withdraw the decision
    finished.update({"encoder=b,seed=3": _result(45), "encoder=b,seed=4": _result(45)})
    assert [r.name for r in plan(exp, finished)[9:]] == ["encoder=b,seed=3", "encoder=b,seed=4"]
    # exactly at the threshold is not above it
    finished.update({"encoder=c,seed=2": _result(10), "encoder=c,seed=1": _result(10 + 2 * 2**0.5)})
    assert len(plan(exp, finished)) == 11


def test_cells_named_in_also_get_the_extra_seeds_whatever_their_std():
    raw = spec(
        grid={"model.encoder": ["a", "b"], "data.train_size": [256, 512], "train.seed": [0, 1]},
        table={"rows": ["model.encoder"], "columns": "data.train_size"},
        seeds_if_noisy={
            "std_above": 2.0,
            "seeds": [3],
            "also": [{"model.encoder": "a", "data.train_size": "256"}],
        },
    )
    exp = experiment_from_dict(raw)
    quiet = {r.name: _result(50) for r in exp.runs()}  # std 0 everywhere
    assert [r.name for r in plan(exp, quiet)[len(exp.runs()) :]] == [
        "encoder=a,train_size=256,seed=3"
    ]
    # not before the cell's grid seeds are in
    del quiet["encoder=a,train_size=256,seed=1"]
    assert len(plan(exp, quiet)) == len(exp.runs())
    for bad, match in (
        ({"model.encoder": "a"}, "exactly"),
        ({"model.encoder": "z", "data.train_size": 256}, "not one of the grid"),
    ):
        raw["seeds_if_noisy"]["also"] = [bad]
        with pytest.raises(ConfigError, match=match):
            experiment_from_dict(raw)


def test_pair_baseline_gives_the_baseline_row_the_extra_seeds_of_its_column():
    raw = spec(
        grid={
            "model.encoder": ["a", "b", "c"],
            "data.train_size": [256, 512],
            "train.seed": [0, 1],
        },
        table={"rows": ["model.encoder"], "columns": "data.train_size", "baseline": "a"},
        seeds_if_noisy={"std_above": 2.0, "seeds": [3, 4], "pair_baseline": True},
    )
    exp = experiment_from_dict(raw)
    finished = {r.name: _result(50) for r in exp.runs()}  # quiet everywhere
    finished["encoder=b,train_size=512,seed=1"] = _result(40)  # b at 512 is noisy
    extra = [r.name for r in plan(exp, finished)[len(exp.runs()) :]]
    assert extra == [
        "encoder=b,train_size=512,seed=3",
        "encoder=b,train_size=512,seed=4",
        "encoder=a,train_size=512,seed=3",
        "encoder=a,train_size=512,seed=4",
    ]
    # both b and c noisy at 512: the baseline's extra seeds are planned once
    finished["encoder=c,train_size=512,seed=1"] = _result(40)
    extra = [r.name for r in plan(exp, finished)[len(exp.runs()) :]]
    assert len(extra) == len(set(extra)) == 6
    # a noisy baseline cell pairs with nothing more
    finished = {r.name: _result(50) for r in exp.runs()}
    finished["encoder=a,train_size=256,seed=1"] = _result(40)
    assert [r.name for r in plan(exp, finished)[len(exp.runs()) :]] == [
        "encoder=a,train_size=256,seed=3",
        "encoder=a,train_size=256,seed=4",
    ]
    # without the flag only the noisy cell gets them
    raw["seeds_if_noisy"]["pair_baseline"] = False
    exp = experiment_from_dict(raw)
    finished["encoder=a,train_size=256,seed=1"] = _result(50)
    finished["encoder=b,train_size=512,seed=1"] = _result(40)
    assert len(plan(exp, finished)) == len(exp.runs()) + 2
    raw["seeds_if_noisy"]["pair_baseline"] = "yes"
    with pytest.raises(ConfigError, match="true or false"):
        experiment_from_dict(raw)
    raw["seeds_if_noisy"]["pair_baseline"] = True
    del raw["table"]["baseline"]
    with pytest.raises(ConfigError, match="needs table.baseline"):
        experiment_from_dict(raw)


def test_a_grid_that_picks_best_on_the_file_it_reports_gets_a_note(capsys, tmp_path):
    def grid(train: dict[str, Any], validation: str | None = None, **extra: Any):
        data = {"eval": "splits/squad1-heldout.mrqa.jsonl.gz", "validation": validation}
        base = {"data": data, "train": train}
        return experiment_from_dict(
            {"name": "t", "base": base, "grid": {"train.seed": [0, 1]}, **extra}, source="t.yaml"
        )

    note = stale.selection_note(grid({"epochs": 3}))
    assert note is not None and "squad1-heldout" in note and "eval_every_epoch: false" in note
    assert stale.selection_note(grid({"epochs": 3, "eval_every_epoch": False})) is None
    # best/ chosen on a validation slice of the training file: data.eval is only the test
    assert stale.selection_note(grid({"epochs": 3}, validation="0.1")) is None
    assert stale.selection_note(grid({"epochs": 1})) is None  # one epoch: nothing is picked
    assert stale.selection_note(grid({"epochs": 1, "max_steps": 500})) is not None
    last_only = grid({"epochs": 3}, table={"metrics": ["last_f1", "last_em"]})
    assert stale.selection_note(last_only) is None
    listing.print_plan(grid({"epochs": 3}), Paths(tmp_path / "res", tmp_path / "runs"))
    assert "note: t.yaml: best/ is the epoch with the best F1" in capsys.readouterr().out


# ---- the runner on the tiny checkpoint ---------------------------------------------------


def tiny_experiment(ckpt: Path, data: Path, **extra: Any):
    base = tiny_finetune_base(ckpt, data)
    return experiment_from_dict(
        {"name": "tiny", "base": base, "grid": {"train.seed": [0, 1]}, **extra},
        source="configs/tiny.yaml",
    )


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


def test_runs_identical_to_another_experiments_finished_runs_reuse_their_results(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch, capsys
):
    source = tiny_experiment(tiny_checkpoint, shared_data)  # seeds 0, 1
    src_paths = Paths(tmp_path / "src-results", tmp_path / "src-runs")
    assert run_experiment(source, src_paths, command="x", progress=False) == 0
    # as if written before train.param_lr existed: a missing key counts as its default; and
    # before data.validation existed: a missing key means best/ was chosen on data.eval,
    # which the shipped configs now say with `validation: none`
    first = src_paths.result(source.runs()[0])
    record = json.loads(first.read_text())
    del record["config"]["train"]["param_lr"]
    del record["config"]["data"]["validation"]
    first.write_text(json.dumps(record))

    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    exp = experiment_from_dict(
        {
            "name": "reuser",
            "base": base,
            "variants": [{"name": "same"}, {"name": "other-lr", "train.lr": 7e-5}],
            "grid": {"train.seed": [0, 1, 2]},
            "reuse": [str(src_paths.results)],
        },
        source="configs/reuser.yaml",
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    listing.print_plan(exp, paths)
    out = capsys.readouterr().out
    assert out.count("will reuse") == 2  # same/seed 0 and 1; other-lr and seed 2 differ
    real_run, trained = loop.run, []

    def spy(cfg, resume=False, progress=True, calibrate=None):
        trained.append(Path(cfg.train.output_dir).name)
        return real_run(cfg, resume=resume, progress=progress, calibrate=calibrate)

    monkeypatch.setattr(loop, "run", spy)
    # --max-runs counts runs trained: the results taken over on the way do not use it up
    assert run_experiment(exp, paths, command="x", max_runs=1, progress=False) == 0
    assert len(trained) == 1 and len(list((paths.results / "runs").glob("*.json"))) >= 2
    assert run_experiment(exp, paths, command="x", progress=False) == 0
    assert sorted(trained) == sorted(
        ["variant=same,seed=2", "variant=other-lr,seed=0", "variant=other-lr,seed=1"]
        + ["variant=other-lr,seed=2"]
    )
    by_name = {r.name: r for r in exp.runs()}
    reused = json.loads(paths.result(by_name["variant=same,seed=0"]).read_text())
    original = json.loads(src_paths.result(source.runs()[0]).read_text())
    assert reused["run"] == "variant=same,seed=0" and reused["experiment"] == "reuser"
    assert reused["reused_from"]["run"] == "seed=0"
    assert reused["reused_from"]["experiment"] == "tiny"
    assert reused["metrics"] == original["metrics"] and reused["git"] == original["git"]
    fresh = json.loads(paths.result(by_name["variant=same,seed=2"]).read_text())
    assert "reused_from" not in fresh
    table = (paths.results / "table.md").read_text()
    assert "- reused: 2 of these results were trained by another experiment" in table
    # a reused run's answers are the ones its source kept (none is copied here)
    scores = bootstrap._Scores("f1", None, paths)
    kept = scores.predictions_file(by_name["variant=same,seed=0"], reused)
    assert kept == src_paths.answers(source.runs()[0]) and kept.is_file()
    assert not paths.answers(by_name["variant=same,seed=0"]).exists()
    assert paths.answers(by_name["variant=same,seed=2"]).is_file()


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


# ---- validation split files ----------------------------------------------------------------


def test_validation_split_files_are_disjoint_by_context_and_readable(tmp_path, shared_data):
    exp = experiment_from_dict(
        {
            "name": "rec",
            "base": {"data": {"dir": str(shared_data), "train": POOL, "train_size": 64}},
            "grid": {"train.seed": [0]},
            "validation": {"fraction": 0.2, "seed": 1234},
        }
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    cfg, split = resolve_config(exp, exp.runs()[0], paths)
    train_file, val_file = Path(cfg.data.train), Path(cfg.data.eval)
    assert train_file.parent.parent == paths.runs / "_validation"
    train, val = read_examples(train_file), read_examples(val_file)
    assert train.version == val.version == "1.1"
    original = {e.id: e for e in read_examples(shared_data / POOL)}
    assert {e.context for e in train}.isdisjoint({e.context for e in val})
    assert sorted([e.id for e in train] + [e.id for e in val]) == sorted(original)
    assert abs(len(val) / len(original) - 0.2) < 0.01
    assert split["val_questions"] == len(val) and split["train_questions"] == len(train)
    # training targets survive the round trip on the training part, gold texts on the other
    assert all(e.answers == original[e.id].answers for e in train)
    assert all(e.gold_texts == original[e.id].gold_texts for e in val)
    # the same split is reused, not rewritten
    before = train_file.stat().st_mtime_ns
    assert validation_files(cfg, ValidationSpec(0.2, 1234), paths.runs / "_validation")[0]
    cfg2, _ = resolve_config(exp, exp.runs()[0], paths)
    assert cfg2.data.train == str(train_file) and train_file.stat().st_mtime_ns == before


def test_validation_split_files_leave_out_excluded_passages(tmp_path, shared_data):
    """With data.exclude, the split is made from the pool less those passages (its own
    folder), so neither the training part nor the slice that chooses best/ holds them."""
    original = read_examples(shared_data / POOL).examples
    contexts = list(dict.fromkeys(e.context for e in original))[:3]
    held = tmp_path / "held.json"
    paragraphs = [
        {
            "context": c,
            "qas": [{"id": f"h{i}", "question": "Q?", "answers": [], "is_impossible": True}],
        }
        for i, c in enumerate(contexts)
    ]
    held.write_text(
        json.dumps({"version": "v2.0", "data": [{"title": "h", "paragraphs": paragraphs}]})
    )
    base = {"dir": str(shared_data), "train": POOL, "train_size": 64}
    exp = experiment_from_dict(
        {
            "name": "rec",
            "base": {"data": {**base, "exclude": [str(held)]}},
            "grid": {"train.seed": [0]},
            "validation": {"fraction": 0.2, "seed": 1234},
        }
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    cfg, split = resolve_config(exp, exp.runs()[0], paths)
    train, val = read_examples(cfg.data.train), read_examples(cfg.data.eval)
    seen = {e.context for e in train} | {e.context for e in val}
    assert seen.isdisjoint(contexts)
    dropped = sum(e.context in set(contexts) for e in original)
    assert split["excluded_questions"] == dropped > 0
    assert len(train) + len(val) == len(original) - dropped
    assert Path(cfg.data.train).parent.name.endswith(split_tag(str(held)))


def split_tag(*excluded: str) -> str:
    return "-excl" + hashlib.sha1("\n".join(sorted(excluded)).encode()).hexdigest()[:8]


EXPERIMENT_CONFIGS = sorted(
    path
    for path in (Path(__file__).resolve().parents[2] / "configs").rglob("*.yaml")
    if "name" in (yaml.safe_load(path.read_text()) or {})  # (train/pretrain configs have none)
)


@pytest.mark.parametrize("path", EXPERIMENT_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_experiment_config_loads_and_plans(path: Path, monkeypatch):
    """Every run of every shipped grid validates (keys, values, pre-training arms, table)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # base paths are repo-relative
    exp = load_experiment(path)
    assert exp.runs(), path


def test_bootstrap_compares_rows_with_the_baseline_from_saved_answers(
    tmp_path, tiny_checkpoint, shared_data
):
    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    raw = {
        "name": "boot",
        "base": base,
        "variants": [{"name": "slow", "train.lr": 1e-5}, {"name": "fast", "train.lr": 3e-3}],
        "grid": {"train.seed": [0, 1]},
        "table": {"rows": ["variant"], "baseline": "slow", "contrasts": [["slow", "fast"]]},
    }
    config = tmp_path / "boot.yaml"
    config.write_text(yaml.safe_dump(raw))
    exp = load_experiment(config)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", progress=False) == 0

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    argv = ["experiment", str(config), "--bootstrap", "--resamples", "200"]
    argv += ["--results", str(paths.results), "--runs-dir", str(paths.runs)]
    args = parser.parse_args(argv)
    assert args.func(args, []) == 0
    got = json.loads((paths.results / "bootstrap.json").read_text())
    cell = got["cells"]["fast"]["F1"]
    results = {r.name: json.loads(paths.result(r).read_text()) for r in exp.runs()}
    f1 = {name: r["metrics"]["f1"] for name, r in results.items()}
    paired = [f1[f"variant=fast,seed={s}"] - f1[f"variant=slow,seed={s}"] for s in (0, 1)]
    # the mean of per-question differences is the difference of the official totals
    assert cell["difference"] == pytest.approx(sum(paired) / 2)
    assert cell["n_runs"] == 2 and cell["resamples"] == 200
    assert cell["ci_low"] <= cell["difference"] <= cell["ci_high"]
    text = (paths.results / "bootstrap.md").read_text()
    assert "| fast |" in text and "made by: `structqa experiment" in text
    assert got["missing_predictions"] == []
    assert "--bootstrap --resamples 200" in text  # the command that remakes it
    # a declared contrast gets the same paired bootstrap, in its own direction
    contrast = got["contrasts"]["slow − fast"]["F1"]
    assert contrast["difference"] == pytest.approx(-cell["difference"])
    assert contrast["seeds"] == [0, 1] and "| slow − fast |" in text
    # a table without a baseline: its contrasts alone, the same (in a copy of the results)
    alone = tmp_path / "boot-contrasts.yaml"
    table = {"rows": ["variant"], "contrasts": [["slow", "fast"]]}
    alone.write_text(yaml.safe_dump({**raw, "table": table}))
    shutil.copytree(paths.results, tmp_path / "results-alone")
    argv_alone = [str(alone) if a == str(config) else a for a in argv]
    argv_alone[argv_alone.index(str(paths.results))] = str(tmp_path / "results-alone")
    args_alone = parser.parse_args(argv_alone)
    assert args_alone.func(args_alone, []) == 0
    only = json.loads((tmp_path / "results-alone" / "bootstrap.json").read_text())
    assert only["cells"] == {} and only["baseline"] is None
    assert only["contrasts"]["slow − fast"]["F1"]["difference"] == contrast["difference"]
    assert "F1 contrasts, bootstrap" in (tmp_path / "results-alone" / "bootstrap.md").read_text()

    # every run's answers are kept with its result, gzipped, byte for byte
    for run in exp.runs():
        best = paths.output(run) / "best" / "predictions.json"
        assert gzip.decompress(paths.answers(run).read_bytes()) == best.read_bytes()

    # a kept file lost: --refresh takes it again from the runs directory
    fast1 = next(r for r in exp.runs() if r.name == "variant=fast,seed=1")
    paths.answers(fast1).unlink()
    refresh_args = parser.parse_args([a if a != "--bootstrap" else "--refresh" for a in argv])
    assert refresh_args.func(refresh_args, []) == 0
    assert paths.answers(fast1).is_file()

    # the runs directory gone (a fresh checkout): the kept answers give the same cells
    shutil.rmtree(paths.runs)
    assert args.func(args, []) == 0
    again = json.loads((paths.results / "bootstrap.json").read_text())
    assert again["cells"] == got["cells"] and again["missing_predictions"] == []

    # a run's answers lost everywhere: the earlier cell, over exactly the seeds paired now,
    # is carried over and says where from
    paths.answers(fast1).unlink()
    assert args.func(args, []) == 0
    carried = json.loads((paths.results / "bootstrap.json").read_text())
    entry = carried["cells"]["fast"]["F1"]
    assert entry["difference"] == cell["difference"] and entry["seeds"] == [0, 1]
    assert entry["carried_from"]["commit"] == again["git"]["commit"]
    assert entry["carried_from"]["made_at"] == again["made_at"]
    assert carried["carried_over"] == ["fast at F1"] and len(carried["missing_predictions"]) == 1
    text = (paths.results / "bootstrap.md").read_text()
    assert "(2) ‡" in text and "‡ Carried over from an earlier bootstrap.json" in text
    # ... and stays carried on the next call (it keeps naming the bootstrap that computed it)
    assert args.func(args, []) == 0
    still = json.loads((paths.results / "bootstrap.json").read_text())
    assert still["cells"]["fast"]["F1"]["carried_from"] == entry["carried_from"]

    # with no earlier cell to carry, the seed pair is left out, and the table says so
    (paths.results / "bootstrap.json").unlink()
    assert args.func(args, []) == 0
    got = json.loads((paths.results / "bootstrap.json").read_text())
    assert got["cells"]["fast"]["F1"]["n_runs"] == 1
    assert got["cells"]["fast"]["F1"]["seeds"] == [0]
    assert got["cells"]["fast"]["F1"]["difference"] == pytest.approx(paired[0])
    assert len(got["missing_predictions"]) == 1 and got["carried_over"] == []
    assert "Not found (no saved answers" in (paths.results / "bootstrap.md").read_text()
    # an earlier cell over fewer seeds is kept only where it covers more than can be compared
    earlier = json.loads((paths.results / "bootstrap.json").read_text())["cells"]["fast"]["F1"]
    assert bootstrap._carry(earlier, bootstrap._Cell([0, 1], [0], None), {}) is None
    kept = bootstrap._carry(earlier, bootstrap._Cell([0, 1], [], None), {"commit": "c"})
    assert kept["seeds"] == [0] and kept["n_runs"] == 1 and kept["carried_from"]["commit"] == "c"
    unlisted = {k: v for k, v in earlier.items() if k != "seeds"}  # written before seeds were
    assert bootstrap._carry(unlisted, bootstrap._Cell([0, 1], [], None), {})["seeds"] is None
    assert bootstrap._carry(earlier, bootstrap._Cell([1, 2], [], None), {}) is None

    # without a baseline there is nothing to compare with
    raw["table"] = {"rows": ["variant"]}
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="neither table.baseline nor table.contrasts"):
        args.func(args, [])


def test_a_misspelt_table_metric_fails_when_the_yaml_loads():
    with pytest.raises(ConfigError, match=r"unknown metric 'f11' \(did you mean 'f1'\?\)"):
        experiment_from_dict(spec(grid={"train.seed": [0]}, table={"metrics": ["f1", "f11"]}))
    ok = experiment_from_dict(
        spec(grid={"train.seed": [0]}, table={"metrics": ["last_f1", "exact", "HasAns_f1"]})
    )
    assert ok.table.metrics == ("last_f1", "exact", "HasAns_f1")


def test_a_run_choosing_on_a_slice_of_its_training_file_reports_its_test_file(
    tmp_path, tiny_checkpoint, shared_data
):
    """data.validation in the training settings (the 5-fold configs): best/ is chosen on a
    slice of data.train, then data.eval is scored once into best/eval/. The run's metrics and
    kept answers are that test's, and the slice's scores are its "dev". best/ is calibrated on
    the slice before the test, as `structqa train` does, and the test's calibration error is
    the one `structqa evaluate` reports for the same checkpoint and file."""
    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    base["data"]["validation"] = 0.5  # one of the fixture's two passages
    exp = experiment_from_dict({"name": "sliced", "base": base, "grid": {"train.seed": [0]}})
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", progress=False) == 0
    (run,) = exp.runs()
    result = json.loads(paths.result(run).read_text())
    best = paths.output(run) / "best"
    tested = json.loads((best / "eval" / "metrics.json").read_text())
    assert {k: result["metrics"][k] for k in tested} == tested
    assert result["dev"] == json.loads((best / "metrics.json").read_text())
    assert result["calibration"]["fit"]["source"].startswith("validation questions")
    assert (best / "calibration.json").is_file() and (best / "eval" / "reliability.png").is_file()
    again = evaluate_checkpoint(best, None, tmp_path / "evaluated", runtime="torch", bf16="off")
    assert again["f1"] == pytest.approx(result["metrics"]["f1"])
    assert again["ece"] == pytest.approx(result["metrics"]["ece"], abs=1e-6)
    assert again["ece_uncalibrated"] == pytest.approx(
        result["metrics"]["ece_uncalibrated"], abs=1e-6
    )
    answers = json.loads(gzip.decompress(paths.answers(run).read_bytes()))
    assert answers == json.loads((best / "eval" / "predictions.json").read_text())
    assert len(answers) == 5  # every question of the test file, not the slice's


def test_a_result_file_that_does_not_parse_is_named(tmp_path) -> None:
    from structqa.experiments.results import load_results
    from structqa.io import UnreadableFile

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "seed=0.json").write_text('{"run": "seed=0"', encoding="utf-8")
    with pytest.raises(UnreadableFile, match=r"seed=0\.json: invalid JSON.*git checkout"):
        load_results(tmp_path)


def test_a_reuse_folder_without_runs_is_named_unless_no_reuse_is_given(
    tmp_path, tiny_checkpoint, shared_data, caplog
):
    exp = tiny_experiment(tiny_checkpoint, shared_data)
    config = tmp_path / "tiny.yaml"
    missing = tmp_path / "docs" / "results" / "not-there"
    config.write_text(
        yaml.safe_dump(
            {
                "name": exp.name,
                "base": exp.base,
                "grid": {"train.seed": [0]},
                "reuse": [str(missing)],
            }
        )
    )
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    argv = ["experiment", str(config), "--dry-run", "--results", str(tmp_path / "r")]
    with caplog.at_level("WARNING"):
        assert parser.parse_args(argv).func(parser.parse_args(argv), []) == 0
    assert f"reuse names {missing}, which holds no runs/" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        args = parser.parse_args([*argv, "--no-reuse"])
        assert args.func(args, []) == 0
    assert "reuse names" not in caplog.text


def test_a_run_trained_in_another_number_format_is_not_reused(
    tmp_path, tiny_checkpoint, shared_data
):
    from structqa.experiments.reuse import find_reusable
    from structqa.experiments.run_config import resolve_config
    from structqa.experiments.store import device_and_bf16

    exp = experiment_from_dict(
        {
            "name": "reuser",
            "base": tiny_finetune_base(tiny_checkpoint, shared_data),
            "grid": {"train.seed": [0]},
            "reuse": [str(tmp_path / "other")],
        }
    )
    cfg = resolve_config(exp, exp.runs()[0], Paths(tmp_path / "r", tmp_path / "runs"))[0]
    device, bf16 = device_and_bf16(cfg)
    same = {"config": cfg.to_dict(), "device": device, "bf16": bf16}
    other = {**same, "bf16": not bf16}
    legacy = {"config": cfg.to_dict()}  # recorded before device and precision were
    assert find_reusable(exp, cfg, [(tmp_path / "a.json", other)]) is None
    assert find_reusable(exp, cfg, [(tmp_path / "a.json", same)])[1] is same
    assert find_reusable(exp, cfg, [(tmp_path / "a.json", legacy)])[1] is legacy


def test_dry_run_names_an_encoder_that_runs_to_train_start_from_and_is_not_there(
    tmp_path, tiny_checkpoint, shared_data, capsys
):
    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    gone = tmp_path / "pretrained" / "final"
    exp = experiment_from_dict(
        {
            "name": "starts",
            "base": base,
            "variants": [{"name": "here"}, {"name": "gone", "model.encoder": str(gone)}],
            "grid": {"train.seed": [0, 1]},
        }
    )
    listing.print_plan(exp, Paths(tmp_path / "results", tmp_path / "runs"))
    out = " ".join(capsys.readouterr().out.split())
    assert f"missing: model.encoder {gone}, which 2 run(s) to train start from" in out
    assert out.count("missing:") == 1  # the encoder that is there is not named
