"""Experiment grids: expansion and validation, extra seeds for noisy cells, and the
validation-split files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny import tiny_finetune_base

from structqa.config import ConfigError
from structqa.experiments import listing, stale
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.runner import run_experiment
from structqa.experiments.spec import ValidationSpec, plan
from structqa.experiments.store import Paths
from structqa.prediction.scoring import evaluate_checkpoint

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
        spec(variants=[{"name": "a", "model.block": ["sa", "nna", "ffn"]}]),  # a typo
    ],
)
def test_invalid_experiments_are_rejected(data):
    with pytest.raises(ConfigError):
        experiment_from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            spec(
                variants=[
                    {"name": "ok", "model.head": "dyref", "model.query_mask": "full"},
                    {"name": "bad", "model": {"head": "dyrex", "query_mask": "full"}},
                ]
            ),
            "x.yaml.variants[1]: run variant=bad: model.query_mask 'full': model.head 'dyrex' "
            "takes bidirectional | causal | independent; 'full' is for dyref, dyref+joint",
        ),
        (
            spec(variants=[{"name": "ok"}, {"name": "bad", "model.dyrex_layers": -1}]),
            "x.yaml.variants[1]: run variant=bad: model.dyrex_layers must be >= 1, got -1",
        ),
        (
            spec(grid={"model.dyrex_layers": [1, 0]}),
            "x.yaml.grid: run dyrex_layers=0: model.dyrex_layers must be >= 1, got 0",
        ),
        (
            spec(base={"model": {"head": "dyrex", "query_mask": "full"}}),
            "x.yaml.base: run base: model.query_mask 'full': model.head 'dyrex' takes",
        ),
    ],
)
def test_settings_the_model_cannot_build_are_refused_naming_where_they_are_set(data, message):
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(data, source="x.yaml")
    assert str(err.value).startswith(message), err.value


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            spec(variants=[{"name": "nc", "model.nc_layer": True}]),
            "x.yaml.variants[0]: model.nc_layer is a setting of `kind: drop` grids "
            "(structqa drop-train), not of this `kind: extractive` grid (structqa train)",
        ),
        (
            spec(base={"model": {"nc_layer": True}}),
            "x.yaml.base: model.nc_layer is a setting of `kind: drop` grids",
        ),
        (
            spec(variants=[{"name": "anna", "masking": {"scheme": "anna"}}]),
            "x.yaml.variants[0]: masking.* belongs in a pre-training arm (`pretrain.arms.NAME`",
        ),
        (spec(grid={"masking.scheme": ["anna"]}), "x.yaml.grid: masking.* belongs in a pre-"),
        (  # a structqa drop-train config given as a grid
            {"model": {"max_decode_len": 12}, "train": {"lr": 1e-4}},
            "x.yaml is not an experiment grid (it has model, train and no name, base, grid or "
            "variants): it looks like a config for `structqa drop-train`: run `structqa "
            "drop-train x.yaml`",
        ),
        (
            {"model": {"added_init": "copy"}, "masking": {"scheme": "anna"}},
            "x.yaml is not an experiment grid (it has model, masking and no name, base, grid or "
            "variants): it looks like a config for `structqa pretrain`",
        ),
        (
            spec(model={"head": "dyrex"}),
            "x.yaml: model at the top level: an experiment sets its runs' config under base",
        ),
    ],
)
def test_a_key_or_file_of_another_command_says_whose_it_is(data, message):
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(data, source="x.yaml")
    assert str(err.value).startswith(message), err.value
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (spec(grid={"train.lr": [1e-4, "fast"]}), "x.yaml.grid: train.lr: expected float"),
        (
            spec(variants=[{"name": "a", "train": {"lr": "fast"}}]),
            "x.yaml.variants[0]: train.lr: expected float, got 'fast'",
        ),
        (spec(base={"train": {"lr": "fast"}}), "x.yaml.base: train.lr: expected float"),
    ],
)
def test_a_bad_value_names_its_key_once(data, message):
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(data, source="x.yaml")
    assert str(err.value).startswith(message) and str(err.value).count("train.lr") == 1


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


# ---- the tiny grid of the runner's tests (test_runner_grid.py) ---------------------------


def tiny_experiment(ckpt: Path, data: Path, **extra: Any):
    base = tiny_finetune_base(ckpt, data)
    return experiment_from_dict(
        {"name": "tiny", "base": base, "grid": {"train.seed": [0, 1]}, **extra},
        source="configs/tiny.yaml",
    )


# ---- validation split files ----------------------------------------------------------------


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
