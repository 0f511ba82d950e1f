"""`kind: drop` experiments: DropConfig keys in base/grid/variants, runs trained with the DROP
loop (tiny encoder on drop-mini), per-run JSONs with dev and per-type test scores, the table,
and skipping finished runs; plus the shipped NC-BERT grids."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from structqa.config import ConfigError
from structqa.experiments import execute
from structqa.experiments.bootstrap import bootstrap_results
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.runner import run_experiment
from structqa.experiments.store import Paths, run_status
from structqa.ncbert.config import DropConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

MINI = "drop/drop-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "ncbert"


def drop_spec(ckpt: Path | str = "default", **extra: Any) -> dict[str, Any]:
    base = {
        "model": {"encoder": str(ckpt), "max_decode_len": 4},
        "data": {"train": [MINI], "eval": MINI, "test": MINI, "max_seq_len": 96},
        "train": {
            "batch_size": 4,
            "eval_batch_size": 16,
            "bf16": "off",
            "max_steps": 2,
            "eval_every_steps": 1,  # dev at step 1 (inside the epoch) and 2 (the end)
        },
    }
    return {
        "name": "tiny-drop",
        "kind": "drop",
        "base": base,
        "variants": [
            {"name": "baseline"},
            {
                "name": "nc",
                # the type channel only: no spaCy here (tests/ncbert covers the entity channel)
                "model": {"nc_layer": True, "nc_heads": [0, 1], "entity_channel": False},
                "model.dice_weight": 0.1,
            },
        ],
        "grid": {"train.seed": [0]},
        "table": {"rows": ["variant"]},
        **extra,
    }


def test_drop_keys_are_checked_against_the_drop_config():
    exp = experiment_from_dict(drop_spec(), source="x.yaml")
    cfg = exp.config_for(exp.runs()[1])
    assert isinstance(cfg, DropConfig) and cfg.model.nc_heads == [0, 1]
    assert cfg.model.dice_weight == 0.1 and exp.config_for(exp.runs()[0]).model.dice_weight == 0
    assert exp.table.metrics[:2] == ("em", "f1") and "spans_f1" in exp.table.metrics
    with pytest.raises(ConfigError, match="did you mean 'nc_heads'"):
        experiment_from_dict(drop_spec(grid={"model.nc_head": [[0]]}))
    with pytest.raises(ConfigError, match="model.max_decode_len is a setting of `kind: drop`"):
        experiment_from_dict({**drop_spec(), "kind": "extractive"})
    with pytest.raises(ConfigError, match=r"decode\.\* is a setting of `kind: extractive` grids"):
        experiment_from_dict(drop_spec(grid={"decode.n_best": [5]}))
    with pytest.raises(ConfigError, match="did you mean 'drop'"):
        experiment_from_dict(drop_spec(kind="dorp"))
    # whole-config validation of every run: NC heads without the NC layer
    with pytest.raises(ConfigError, match=r"run variant=bad,seed=0: .*nc_layer"):
        experiment_from_dict(drop_spec(variants=[{"name": "bad", "model.nc_heads": [0]}]))
    # a head the encoder does not have: refused with the grid, not when the run's model is built
    with pytest.raises(ConfigError) as err:
        bad = {"name": "bad", "model": {"nc_layer": True, "nc_heads": [0, 40]}}
        experiment_from_dict(drop_spec(variants=[{"name": "ok"}, bad]), source="x.yaml")
    assert str(err.value).startswith(
        "x.yaml.variants[1]: run variant=bad,seed=0: model.nc_heads [0, 40]: head 40 does not "
        "exist: the encoder (model.encoder 'default', "
    ), err.value
    assert "has 12 attention heads, numbered 0 to 11; list heads below 12" in str(err.value)
    with pytest.raises(ConfigError, match="data.test"):
        spec = drop_spec()
        spec["base"]["data"]["test"] = None
        experiment_from_dict(spec)
    with pytest.raises(ConfigError, match="validation"):
        experiment_from_dict(drop_spec(validation={"fraction": 0.2}))


def test_drop_experiment_runs_end_to_end_and_skips_finished_runs(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    exp = experiment_from_dict(drop_spec(tiny_checkpoint), source="configs/tiny-drop.yaml")
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    cmd = "structqa experiment configs/tiny-drop.yaml"
    code = run_experiment(exp, paths, command=cmd, data_dir=str(shared_data), progress=False)
    assert code == 0
    assert [run_status(paths, r) for r in exp.runs()] == ["done", "done"]
    for run in exp.runs():
        result = json.loads(paths.result(run).read_text())
        assert result["run"] == run.name and result["seed"] == 0 and result["command"] == cmd
        assert {"git", "machine", "wall_time_s", "device", "bf16"} <= set(result)
        assert result["config"]["train"]["output_dir"] == str(paths.output(run))
        assert result["config"]["data"]["dir"] == str(shared_data)
        test, dev, metrics = result["test"], result["dev"], result["metrics"]
        assert test["total"] == 19 and dev["total"] == 19
        assert metrics["f1"] == pytest.approx(100 * test["global_f1"])
        assert metrics["exact_match"] == pytest.approx(100 * test["global_em"])
        assert metrics["dev_f1"] == pytest.approx(100 * dev["global_f1"])
        for kind in ("date", "number", "span", "spans"):
            if kind in test["per_type"]:
                assert metrics[f"{kind}_f1"] == pytest.approx(100 * test["per_type"][kind]["f1"])
            else:
                assert metrics[f"{kind}_f1"] is None
        assert {"number", "span"} <= set(test["per_type"])  # drop-mini has both
        saved = json.loads((paths.output(run) / "best" / "test" / "metrics.json").read_text())
        assert saved == test
        assert result["steps"] == 2 and result["best_epoch"] == 1
        history = result["eval_history"]
        assert [h["step"] for h in history] == [1, 2]
        best = max(history, key=lambda h: h["global_f1"])  # the first of equal F1s
        assert result["best_step"] == best["step"] and dev == {
            k: v for k, v in best.items() if k not in ("epoch", "step")
        }
    nc = json.loads(paths.result(exp.runs()[1]).read_text())
    assert nc["config"]["model"]["nc_heads"] == [0, 1] and nc["grid"]["variant"] == "nc"

    table = (paths.results / "table.md").read_text()
    assert "reproduce: `structqa experiment configs/tiny-drop.yaml`" in table
    assert "runs: 2 of 2 finished" in table and "official DROP EM/F1" in table
    head = next(line for line in table.splitlines() if line.startswith("| variant"))
    assert head == ("| variant | EM | F1 | number F1 | date F1 | span F1 | spans F1 | dev F1 |")
    baseline_row = next(line for line in table.splitlines() if line.startswith("| baseline"))
    f1 = json.loads(paths.result(exp.runs()[0]).read_text())["metrics"]["f1"]
    assert f"{f1:.2f} ± n/a (1)" in baseline_row

    # each run's test answers are kept with its result, and --bootstrap pairs them by
    # question against the baseline (accuracy: the EM of number-only files, word problems)
    for run in exp.runs():
        answers = paths.output(run) / "best" / "test" / "predictions.json"
        assert gzip.decompress(paths.answers(run).read_bytes()) == answers.read_bytes()
    spec = drop_spec(tiny_checkpoint)
    spec["table"] = {"rows": ["variant"], "baseline": "baseline", "metrics": ["acc", "f1"]}
    boot = experiment_from_dict(spec, source="configs/tiny-drop.yaml")
    cmd_boot = "structqa experiment x --bootstrap"
    bootstrap_results(boot, paths, command=cmd_boot, data_dir=str(shared_data), resamples=100)
    cells = json.loads((paths.results / "bootstrap.json").read_text())["cells"]
    em = {
        r.name: json.loads(paths.result(r).read_text())["metrics"]["exact_match"]
        for r in exp.runs()
    }
    assert cells["nc"]["accuracy"]["difference"] == pytest.approx(
        em["variant=nc,seed=0"] - em["variant=baseline,seed=0"]
    )

    # a rerun trains nothing: both runs have results
    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(execute.drop_loop, "run", fail)
    monkeypatch.setattr(execute.loop, "run", fail)
    before = paths.result(exp.runs()[0]).read_text()
    assert run_experiment(exp, paths, command=cmd, data_dir=str(shared_data)) == 0
    assert paths.result(exp.runs()[0]).read_text() == before


def test_shipped_ncbert_grids_expand_and_fine_tune_from_the_synthetic_checkpoint():
    grid = load_experiment(CONFIGS / "grid.yaml")
    heads = load_experiment(CONFIGS / "heads.yaml")
    assert grid.kind == heads.kind == "drop"
    assert [n for n, _ in grid.variants] == [
        "baseline",
        "entity",
        "type",
        "decoder-number",
        "nc-mask",
        "nc-mask+dice",
        "dice",
        "ncbert",
    ]
    assert len(grid.runs()) == 8 * 3 and len(heads.runs()) == 5 * 3
    by_name = {r.name: grid.config_for(r) for r in grid.runs()}
    base = by_name["variant=baseline,seed=0"].model
    assert not base.nc_layer and not base.decoder_number_mask and base.dice_weight == 0
    entity = by_name["variant=entity,seed=1"].model
    assert entity.nc_layer and entity.entity_channel and not entity.type_channel
    ncbert = by_name["variant=ncbert,seed=2"]
    assert ncbert.model.nc_layer and ncbert.model.dice_weight > 0 and ncbert.model.lsdf
    assert ncbert.train.seed == 2
    k = {r.name.split(",")[0]: len(heads.config_for(r).model.nc_heads) for r in heads.runs()}
    assert k == {f"variant=k{n}": n for n in (0, 1, 2, 4, 12)}  # k = 6: the grid's nc-mask
    k0 = heads.config_for(heads.runs()[0]).model  # the extra layer with no masked head
    assert k0.nc_layer and not k0.nc_heads and not k0.needs_annotations
    placement = load_experiment(CONFIGS / "placement.yaml")
    replaced = {placement.config_for(r).model.nc_replace for r in placement.runs()}
    assert replaced == {"all_layers", "last_all", "last_single", "last_odd", "last_even"}
    assert not any(placement.config_for(r).model.nc_layer for r in placement.runs())
    for exp in (grid, heads, placement):
        for run in exp.runs():
            cfg = exp.config_for(run)
            assert cfg.model.init == "runs/ncbert/pretrain-synthetic/best"
            assert cfg.data.train == ["drop/drop-train-sample.json", "drop/drop-mini.json"]
            assert cfg.data.eval == "drop/drop-dev-sample.json"
            assert cfg.data.test == "drop/drop-contrast-sets.json"
