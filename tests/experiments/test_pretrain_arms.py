"""Pre-training arms in an experiment: validation of the ``pretrain`` section, and the runner
pre-training each referenced arm once (resumably) before the runs that fine-tune from it."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny import tiny_finetune_base

from structqa.config import ConfigError
from structqa.experiments import arms, listing, runner
from structqa.experiments.claims import try_claim
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.runner import run_experiment
from structqa.experiments.store import Launch, Paths, pretrain_status
from structqa.pretrain import loop as pretrain_loop

pytestmark = pytest.mark.usefixtures("one_thread")

MINI = "fixtures/squad-v1.1-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The mini fixture's context sentences as a JSONL corpus (token masking needs no tags)."""
    data = json.loads((shared_data / MINI).read_text(encoding="utf-8"))
    texts = [
        s
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for s in re.split(r"(?<=\.) ", paragraph["context"])
        if s.strip()
    ]
    path = tmp_path_factory.mktemp("corpus") / "mini.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"c{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


def pretrain_base(ckpt: Path, corpus: Path) -> dict[str, Any]:
    return {
        "model": {"encoder": str(ckpt)},
        "data": {"corpus": str(corpus), "heldout_fraction": 0.2, "max_seq_len": 64},
        "masking": {"scheme": "token"},
        "train": {
            "batch_size": 2,
            "eval_batch_size": 4,
            "lr": 1e-3,
            "max_steps": 3,
            "bf16": "off",
            "eval_every_steps": None,
            "save_every_steps": 1,
            "log_every_steps": 1,
        },
    }


def experiment(ckpt: Path, corpus: Path, data: Path, **extra: Any):
    base = tiny_finetune_base("pretrain:tok", data)
    raw = {
        "name": "arms",
        "base": base,
        "pretrain": {
            "base": pretrain_base(ckpt, corpus),
            "arms": {"tok": {}, "naa": {"model.block": ["sa", "naa", "ffn"]}},
        },
        "variants": [
            {"name": "tok-a", "model": {"encoder": "pretrain:tok"}},
            {"name": "tok-b", "model": {"encoder": "pretrain:tok"}, "train": {"lr": 5e-5}},
            {"name": "plain", "model": {"encoder": str(ckpt)}},
        ],
        "table": {"rows": ["variant"]},
        **extra,
    }
    return experiment_from_dict(raw, source="configs/arms.yaml")


def spy_on_pretraining(monkeypatch) -> list[tuple[str, bool]]:
    """Record (arm directory name, resumed?) for each pre-training the runner starts."""
    real, seen = pretrain_loop.run, []

    def spy(cfg, resume=False, progress=True):
        seen.append((Path(cfg.train.output_dir).name, resume))
        return real(cfg, resume=resume, progress=progress)

    monkeypatch.setattr(pretrain_loop, "run", spy)
    return seen


def test_runner_pretrains_each_referenced_arm_once_and_fine_tunes_from_it(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    seen = spy_on_pretraining(monkeypatch)
    assert run_experiment(exp, paths, command="structqa experiment arms", progress=False) == 0
    # tok is pre-trained once for its two runs; naa is referenced by no run, so never trained
    assert seen == [("tok", False)]
    assert pretrain_status(paths, "tok") == "done" and pretrain_status(paths, "naa") == "todo"
    record = json.loads(paths.pretrain_result("tok").read_text())
    final = paths.pretrain_output("tok") / "final"
    assert record["arm"] == "tok" and record["steps"] == 3 and record["sessions"] == 1
    assert 0.0 <= record["metrics"]["mlm_accuracy"] <= 1.0
    assert record["metrics"] == json.loads((final / "metrics.json").read_text())
    assert record["config"]["train"]["output_dir"] == str(paths.pretrain_output("tok"))
    assert {"git", "machine", "command", "wall_time_s", "device"} <= set(record)
    for run in exp.runs():
        result = json.loads(paths.result(run).read_text())
        want = str(tiny_checkpoint) if run.name.startswith("variant=plain") else str(final)
        assert result["config"]["model"]["encoder"] == want, run.name
    table = (paths.results / "table.md").read_text()
    assert "- pre-training arms: `tok`; each arm's recipe" in table  # where to find its record
    # everything done: nothing is trained again
    seen.clear()
    assert run_experiment(exp, paths, command="structqa experiment arms", progress=False) == 0
    assert seen == []


def test_pretrain_only_trains_the_selected_runs_arms_and_fine_tunes_nothing(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    seen = spy_on_pretraining(monkeypatch)
    with pytest.raises(ConfigError, match="no run whose name contains 'plain' fine-tunes"):
        runner.pretrain_arms(exp, paths, command="x", only="plain", progress=False)
    assert runner.pretrain_arms(exp, paths, command="x", only="tok", progress=False) == 0
    # tok-a and tok-b share one arm, trained once; naa is referenced by no run
    assert seen == [("tok", False)]
    assert pretrain_status(paths, "tok") == "done" and pretrain_status(paths, "naa") == "todo"
    assert not any(paths.result(r).exists() for r in exp.runs())
    assert json.loads(paths.pretrain_result("tok").read_text())["command"] == "x"
    # again: the arm is done, nothing trains; the grid then fine-tunes from it untouched
    assert runner.pretrain_arms(exp, paths, command="x", progress=False) == 0
    assert run_experiment(exp, paths, command="x", max_runs=1, progress=False) == 0
    assert seen == [("tok", False)]


def test_pretrain_only_from_the_command_line(tmp_path, tiny_checkpoint, corpus, shared_data):
    import argparse

    from structqa.commands.experiment import add_parser

    raw = {
        "name": "arms",
        "base": tiny_finetune_base("pretrain:tok", shared_data),
        "pretrain": {"base": pretrain_base(tiny_checkpoint, corpus), "arms": {"tok": {}}},
        "variants": [{"name": "tok-a", "model": {"encoder": "pretrain:tok"}}],
    }
    config = tmp_path / "arms.yaml"
    config.write_text(yaml.safe_dump(raw))
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    argv = ["experiment", str(config), "--pretrain-only", "--no-progress"]
    argv += ["--results", str(paths.results), "--runs-dir", str(paths.runs)]
    with pytest.raises(ConfigError, match="takes no --max-runs"):
        args = parser.parse_args([*argv, "--max-runs", "1"])
        args.func(args, [])
    with pytest.raises(SystemExit):  # one mode at a time
        parser.parse_args([*argv, "--dry-run"])
    args = parser.parse_args(argv)
    assert args.func(args, []) == 0
    assert pretrain_status(paths, "tok") == "done"
    assert not (paths.results / "runs").exists()  # nothing fine-tuned


def test_pretrain_only_needs_a_pretrain_section(tmp_path, tiny_checkpoint, shared_data):
    raw = {
        "name": "plain",
        "base": tiny_finetune_base(str(tiny_checkpoint), shared_data),
        "grid": {"train.seed": [0]},
    }
    exp = experiment_from_dict(raw, source="configs/plain.yaml")
    with pytest.raises(ConfigError, match="has no pretrain section"):
        runner.pretrain_arms(exp, Paths(tmp_path / "r", tmp_path / "o"), command="x")


def test_a_run_whose_arm_another_worker_is_pretraining_waits_for_it_then_runs(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch, caplog
):
    # (these runs used to be skipped for the whole session, so a --workers grid started without
    # --pretrain-only left an arm's fine-tunes to the one worker that pre-trained it)
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    monkeypatch.setattr(runner, "ARM_WAIT_POLL_S", 0.05)
    events: list[str] = []
    real_run = pretrain_loop.run

    def pretrain(cfg, **kw):
        events.append("pretrain")
        return real_run(cfg, **kw)

    monkeypatch.setattr(pretrain_loop, "run", pretrain)
    busy = try_claim(paths.runs, "pretrain/tok")  # another worker, training the arm
    assert busy is not None

    def holder_stops():  # the holder stops before finishing: its claim goes with it
        events.append("released")
        busy.release()

    timer = threading.Timer(1.0, holder_stops)
    timer.start()
    try:
        with caplog.at_level(logging.INFO):
            assert run_experiment(exp, paths, command="x", progress=False) == 0
    finally:
        timer.cancel()
        busy.release()
    assert f"is being trained by pid {os.getpid()}" in caplog.text  # the holder is named
    assert "waiting for pretrain/tok" in caplog.text
    # nothing touched the arm while it was held; then this worker took it over, trained it
    # once, and fine-tuned both of its runs
    assert events == ["released", "pretrain"]
    assert all(paths.result(r).exists() for r in exp.runs())
    assert pretrain_status(paths, "tok") == "done"


def test_the_arms_claim_is_held_while_it_pretrains(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch
):
    # (a claim released before training let 8 GPU workers all train the first arm at once)
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    free_during_run: list[bool] = []
    real_run = pretrain_loop.run

    def run_and_probe(cfg, **kw):
        other = try_claim(paths.runs, "pretrain/tok")  # another worker's attempt
        free_during_run.append(other is not None)
        if other is not None:
            other.release()
        return real_run(cfg, **kw)

    monkeypatch.setattr(pretrain_loop, "run", run_and_probe)
    assert arms.ensure_pretrained(exp, "tok", paths, Launch("x", {})) is not None
    assert free_during_run == [False]
    assert try_claim(paths.runs, "pretrain/tok") is not None  # released once finished


def test_interrupted_pretraining_stops_the_runner_and_resumes(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    real_forward, calls = pretrain_loop._forward, {"n": 0}

    def forward_then_interrupt(model, raw_model, batch):
        if model.training:  # training steps only, not held-out evaluation
            calls["n"] += 1
            if calls["n"] == 2:
                os.kill(os.getpid(), signal.SIGINT)
        return real_forward(model, raw_model, batch)

    monkeypatch.setattr(pretrain_loop, "_forward", forward_then_interrupt)
    code = run_experiment(exp, paths, command="x", progress=False)
    assert code == runner.EXIT_INTERRUPTED
    assert pretrain_status(paths, "tok") == "partial"
    assert not any(paths.result(r).exists() for r in exp.runs())

    monkeypatch.setattr(pretrain_loop, "_forward", real_forward)
    assert run_experiment(exp, paths, command="x", progress=False) == 0
    record = json.loads(paths.pretrain_result("tok").read_text())
    assert record["steps"] == 3 and record["sessions"] == 2


def test_an_arm_trained_with_another_config_is_an_error_naming_the_keys(
    tmp_path, tiny_checkpoint, corpus, shared_data
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", max_runs=1, progress=False) == 0
    assert pretrain_status(paths, "tok") == "done"
    changed = experiment(tiny_checkpoint, corpus, shared_data)
    changed.pretrain.arms["tok"]["train.lr"] = 5e-4  # the YAML edited after the arm trained
    # caught before anything trains: the finished fine-tune stands for the old arm
    with pytest.raises(ConfigError, match=r"variant=tok-a: pretrain:tok \(train\.lr\)"):
        run_experiment(changed, paths, command="x", progress=False)
    # the arm's own records deleted to retrain it, as its error says: the finished fine-tune
    # still records the recipe it started from, and is still named
    import shutil

    shutil.rmtree(paths.pretrain_output("tok"))
    paths.pretrain_result("tok").unlink()
    assert json.loads(paths.result(exp.runs()[0]).read_text())["pretrain_arm"]["name"] == "tok"
    with pytest.raises(ConfigError, match=r"variant=tok-a: pretrain:tok \(train\.lr\)"):
        run_experiment(changed, paths, command="x", progress=False)
    # a new name for the new recipe, as the error offers: the old fine-tune is still named
    renamed = experiment(tiny_checkpoint, corpus, shared_data)
    renamed.pretrain.arms["tok2"] = renamed.pretrain.arms.pop("tok")
    renamed.base["model"]["encoder"] = "pretrain:tok2"
    for _, values in renamed.variants:
        if values.get("model.encoder") == "pretrain:tok":
            values["model.encoder"] = "pretrain:tok2"
    with pytest.raises(ConfigError, match=r"variant=tok-a: pretrain:tok \(now pretrain:tok2\)"):
        run_experiment(renamed, paths, command="x", progress=False)
    # its run unfinished (a checkpoint to resume, no result): the same, before any pre-training
    from structqa.experiments.stale import stale_partial

    run = exp.runs()[0]
    assert (paths.output(run) / "last" / "resume.pt").is_file()
    paths.result(run).unlink()
    assert stale_partial(exp, paths, run) == []
    assert stale_partial(changed, paths, run) == ["pretrain:tok (train.lr)"]
    assert renamed.runs()[0].name == run.name
    assert stale_partial(renamed, paths, renamed.runs()[0]) == ["pretrain:tok (now pretrain:tok2)"]


def test_an_arm_without_held_out_chunks_finishes_and_is_used(
    tmp_path, tiny_checkpoint, corpus, shared_data
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    exp.pretrain.arms["tok"]["data.heldout_fraction"] = 0.0
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", max_runs=1, progress=False) == 0
    record = json.loads(paths.pretrain_result("tok").read_text())
    assert record["metrics"] == {} and record["steps"] == 3
    assert pretrain_status(paths, "tok") == "done"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"variants": [{"name": "v", "model": {"encoder": "pretrain:tokk"}}]},
            "did you mean 'tok'",
        ),
        ({"pretrain": None}, "no 'pretrain' section"),
        (
            {"pretrain": {"base": {}, "arms": {"a": {"masking.schem": "token"}}}},
            "did you mean 'scheme'",
        ),
        ({"pretrain": {"base": {}, "arms": {"a": {"train.output_dir": "x"}}}}, "set by the runner"),
        ({"pretrain": {"base": {}, "arms": {}}}, "arms"),
        ({"pretrain": {"base": {}, "arms": {"a": "token"}}}, "expected a mapping"),
        ({"pretrain": {"base": "no/such.yaml", "arms": {"a": {}}}}, "does not exist"),
        ({"pretrain": {"bse": {}, "arms": {"a": {}}}}, "base"),
    ],
)
def test_pretrain_section_errors_name_the_problem(
    tiny_checkpoint, corpus, shared_data, change, message
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    raw: dict[str, Any] = {
        "name": "arms",
        "base": {"model": {"encoder": "pretrain:tok"}},
        "pretrain": {"base": pretrain_base(tiny_checkpoint, corpus), "arms": {"tok": {}}},
        "variants": [{"name": "v", "model": {"encoder": "pretrain:tok"}}],
        "table": {"rows": ["variant"]},
    }
    raw.update(change)
    if raw["pretrain"] is None:
        del raw["pretrain"]
    assert exp.pretrain is not None
    with pytest.raises(ConfigError, match=re.escape(message)):
        experiment_from_dict(raw, source="x.yaml")


def test_shipped_anna_config_loads_and_every_arm_validates():
    exp = load_experiment(CONFIGS / "anna" / "finetune.yaml")
    assert exp.pretrain is not None
    arms = yaml.safe_load((CONFIGS / "anna" / "finetune.yaml").read_text())["pretrain"]["arms"]
    assert list(exp.pretrain.arms) == list(arms)
    for arm in exp.pretrain.arms:
        cfg = exp.pretrain.config_for(arm)
        assert cfg.train.max_steps == 200 and cfg.train.batch_size == 32  # one budget
    used = {str(exp.config_for(r).model.encoder) for r in exp.runs()}
    assert {f"pretrain:{a}" for a in exp.pretrain.arms} <= used


def test_a_finished_arm_is_used_while_another_worker_holds_its_claim(
    tmp_path, tiny_checkpoint, corpus, shared_data
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    final = arms.ensure_pretrained(exp, "tok", paths, Launch("x", {}))
    busy = try_claim(paths.runs, "pretrain/tok")  # e.g. a worker checking it at this moment
    assert busy is not None
    try:
        assert arms.ensure_pretrained(exp, "tok", paths, Launch("x", {})) == final
    finally:
        busy.release()


def test_dry_run_names_the_missing_corpus_of_an_arm_that_runs_start_from(
    tmp_path, tiny_checkpoint, corpus, shared_data, capsys
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    gone = tmp_path / "corpus-whole"
    exp.pretrain.arms["tok"]["data.corpus"] = str(gone)
    exp.pretrain.arms["naa"]["data.corpus"] = str(gone)  # no run starts from it: not named
    listing.print_plan(exp, Paths(tmp_path / "results", tmp_path / "runs"))
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"missing: data.corpus {gone} of pre-training arm(s) tok, which 2 run(s) to train "
        "start from (first: variant=tok-a)"
    ) in out, out
    assert "`structqa corpus --out`" in out
    assert out.count("missing:") == 1  # (the checkpoint the plain run starts from is there)


def interrupt_pretraining_at_step(monkeypatch, step: int) -> None:
    """SIGINT during training step ``step``: the loop finishes it, saves last/ and stops."""
    real_forward, calls = pretrain_loop._forward, {"n": 0}

    def forward_then_interrupt(model, raw_model, batch):
        if model.training:  # training steps only, not held-out evaluation
            calls["n"] += 1
            if calls["n"] == step:
                os.kill(os.getpid(), signal.SIGINT)
        return real_forward(model, raw_model, batch)

    monkeypatch.setattr(pretrain_loop, "_forward", forward_then_interrupt)


@pytest.mark.parametrize(
    ("killed", "resumed"),
    [
        # between the swap's renames: the checkpoint is at last.old, the next one at last.tmp
        ("between-renames", True),
        # while its first last/ was written: only a last.tmp cut short, nothing to resume
        ("first-write", False),
    ],
)
def test_an_arm_killed_during_a_checkpoint_swap_goes_on_when_the_grid_is_run_again(
    tmp_path, tiny_checkpoint, corpus, shared_data, monkeypatch, killed, resumed
):
    exp = experiment(tiny_checkpoint, corpus, shared_data)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    real_forward = pretrain_loop._forward
    interrupt_pretraining_at_step(monkeypatch, 2)
    assert arms.ensure_pretrained(exp, "tok", paths, Launch("x", {})) is None
    out = paths.pretrain_output("tok")
    last, tmp = out / "last", out / "last.tmp"
    assert json.loads((last / "train_state.json").read_text())["global_step"] == 2
    if killed == "between-renames":
        shutil.copytree(last, tmp)
        last.rename(out / "last.old")
    else:
        last.rename(tmp)
        (tmp / "resume.pt").unlink()
    assert not last.exists()
    monkeypatch.setattr(pretrain_loop, "_forward", real_forward)
    seen = spy_on_pretraining(monkeypatch)
    final = arms.ensure_pretrained(exp, "tok", paths, Launch("x", {}))
    assert final is not None and seen == [("tok", resumed)]
    assert json.loads(paths.pretrain_result("tok").read_text())["steps"] == 3
    assert not tmp.exists() and not (out / "last.old").exists()
