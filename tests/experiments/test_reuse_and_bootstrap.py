"""Tables across grids: runs taken over from other grids (reuse), the paired bootstrap of
a table's rows and contrasts, result files, what --dry-run says before a grid trains, and
the validation split files a grid chooses best/ on."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_grid import POOL, tiny_experiment
from tiny import tiny_finetune_base

from structqa.commands.experiment import add_parser
from structqa.config import ConfigError
from structqa.data import read_examples
from structqa.experiments import bootstrap, listing
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.run_config import resolve_config, validation_files
from structqa.experiments.runner import run_experiment
from structqa.experiments.spec import ValidationSpec
from structqa.experiments.store import Paths
from structqa.training import loop


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
