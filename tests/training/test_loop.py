"""Extractive QA training end to end: overfitting a tiny set, exact resume after a SIGINT and
a crash mid-swap, 2-process gloo, refused resumes. (The scaffold's own tests, on a toy task:
tests/training/test_trainer.py.)"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import interrupt_at_batch, weights_sha256

from structqa.cli import main
from structqa.config import load_config
from structqa.manifest import seal_file
from structqa.training import loop

MINI = "fixtures/squad-v1.1-mini.json"


def tiny_config(tmp: Path, ckpt: Path, data: Path, *extra: str):
    return load_config(
        overrides=[
            f"model.encoder={ckpt}",
            f"data.dir={data}",
            f"data.train={MINI}",
            f"data.eval={MINI}",
            "data.validation=none",  # the loop chooses best/ on data.eval: fits it exactly
            "data.train_size=all",
            "data.max_seq_len=128",
            "data.doc_stride=32",
            f"train.output_dir={tmp}",
            "train.batch_size=2",
            "train.bf16=off",
            "train.log_every_steps=1",
            *extra,
        ]
    )


def test_overfits_tiny_set_to_em_100(tmp_path, tiny_checkpoint, shared_data):
    # The fixture's answer "Father Julius Nieuwl" ends inside the word "Nieuwland", which no
    # token span can reproduce exactly; the other four answers are token-aligned.
    data = json.loads((shared_data / MINI).read_text())
    for article in data["data"]:
        for par in article["paragraphs"]:
            par["qas"] = [
                qa for qa in par["qas"] if qa["answers"][0]["text"] != "Father Julius Nieuwl"
            ]
    (tmp_path / "mini4.json").write_text(json.dumps(data))
    cfg = tiny_config(
        tmp_path / "run",
        tiny_checkpoint,
        shared_data,
        f"data.train={tmp_path / 'mini4.json'}",
        f"data.eval={tmp_path / 'mini4.json'}",
        "train.lr=3e-3",
        "train.epochs=60",
        "train.warmup_ratio=0.05",
        "train.dropout=0.0",
        "train.eval_every_epoch=false",
        "train.weight_decay=0.0",
    )
    result = loop.run(cfg, progress=False)
    assert result is not None
    assert result.metrics["exact_match"] == 100.0, result.metrics
    best = tmp_path / "run" / "best"
    for name in (
        "model.safetensors",
        "structqa_config.json",
        "tokenizer.json",
        "metrics.json",
        "predictions.json",
        "nbest_predictions.json",
        "null_odds.json",
    ):
        assert (best / name).exists(), name
    log = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in log if "loss" in x]
    assert losses[-1] < losses[0] / 10


@pytest.mark.parametrize("block", [None, "[sa, naa, ffn]"], ids=["as-shipped", "converted"])
def test_resume_continues_exactly(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch, caplog, block
):
    """Also with ``model.block`` converting the encoder: the resumed run rebuilds the converted
    model from the original checkpoint and must land on the same weights."""
    args = ("train.max_steps=7", "train.lr=1e-3", "train.dropout=0.1")
    if block is not None:
        args = (*args, f"model.block={block}")
    straight = tiny_config(tmp_path / "a", tiny_checkpoint, shared_data, *args)
    loop.run(straight, progress=False)
    expected = load_file(str(tmp_path / "a" / "last" / "model.safetensors"))
    assert any(".sublayers.2." in name for name in expected) == (block is not None)

    # interrupt run b with a real SIGINT in the middle of its second epoch (after batch 4)
    real_collate = interrupt_at_batch(monkeypatch, 5)
    interrupted = tiny_config(tmp_path / "b", tiny_checkpoint, shared_data, *args)
    loop.run(interrupted, progress=False)
    state = json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())
    assert state["global_step"] == 5 and not state["finished"]
    # the state's wall time goes on from what earlier starts spent (stated large here, so
    # that a resumed run counting only its own time would show)
    assert state["seconds"] >= 0.0  # (kept to a tenth of a second: 0.0 for a tiny run)
    state["seconds"] = 1000.0
    (tmp_path / "b" / "last" / "train_state.json").write_text(json.dumps(state))
    seal_file(tmp_path / "b" / "last", "train_state.json")

    # and then a crash between the two renames of a checkpoint swap: last/ gone, the
    # previous checkpoint at last.old, a half-written last.tmp; resume must use last.old
    run_dir = tmp_path / "b"
    os.replace(run_dir / "last", run_dir / "last.old")
    (run_dir / "last.tmp").mkdir()
    (run_dir / "last.tmp" / "model.safetensors").write_bytes(b"cut short")

    monkeypatch.setattr(loop, "collate", real_collate)
    with caplog.at_level(logging.INFO):
        loop.run(interrupted, resume=True, progress=False)
    assert "recovered from" in caplog.text and "resumed at epoch 1, batch 1, step 5" in caplog.text
    assert not (run_dir / "last.old").exists() and not (run_dir / "last.tmp").exists()
    resumed = load_file(str(tmp_path / "b" / "last" / "model.safetensors"))
    final = json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())
    assert final["finished"] and 1000.0 <= final["seconds"] < 1000.0 + 600
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed[name]), name
    # the same weights hash, as each checkpoint's manifest records it
    assert weights_sha256(tmp_path / "a" / "last") == weights_sha256(tmp_path / "b" / "last")


def test_two_process_gloo_training(tmp_path, tiny_checkpoint, shared_data):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_port=29517",
        "-m",
        "structqa.cli",
        "train",
        "--no-progress",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.dir={shared_data}",
        f"--data.train={MINI}",
        f"--data.eval={MINI}",
        "--data.validation=none",
        "--data.train_size=all",
        "--data.max_seq_len=128",
        "--data.doc_stride=32",
        f"--train.output_dir={out}",
        "--train.batch_size=1",
        "--train.max_steps=4",
        "--train.bf16=off",
        "--train.log_every_steps=1",
        "--train.eval_batch_size=2",  # several evaluation batches: each process scores some
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es)" in proc.stderr + proc.stdout
    state = json.loads((out / "last" / "train_state.json").read_text())
    assert state["finished"] and state["global_step"] == 4
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in log if "loss" in x] == [1, 2, 3, 4]
    assert all(torch.isfinite(torch.tensor(x["loss"])) for x in log if "loss" in x)
    metrics = json.loads((out / "best" / "metrics.json").read_text())
    assert "exact_match" in metrics
    # the sharded evaluation equals one process evaluating the same weights
    args = ["evaluate", str(out / "best"), f"--data={shared_data}", f"--eval={MINI}"]
    assert main([*args, "--out", str(tmp_path / "single"), "--bf16=off"]) == 0
    single = json.loads((tmp_path / "single" / "metrics.json").read_text())
    assert {k: single[k] for k in ("exact_match", "f1")} == {
        k: metrics[k] for k in ("exact_match", "f1")
    }
    assert json.loads((tmp_path / "single" / "predictions.json").read_text()) == json.loads(
        (out / "best" / "predictions.json").read_text()
    )


def test_a_command_closes_the_process_group_it_ran_in(tmp_path, capsys):
    # under torchrun a finished command's process group is closed before the interpreter
    # exits, where gloo's teardown could abort a process that had finished its work
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        # not after an error: the other processes may still wait in a collective
        assert main(["config", "train.no_such_setting"]) == 2
        assert dist.is_initialized()
        assert main(["config", "train.lr"]) == 0
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert "train.lr" in capsys.readouterr().out


def test_resume_refuses_a_changed_config(tmp_path, tiny_checkpoint, shared_data, monkeypatch):
    args = ("train.max_steps=6", "train.lr=1e-3")
    interrupt_at_batch(monkeypatch, 3)
    loop.run(tiny_config(tmp_path / "r", tiny_checkpoint, shared_data, *args), progress=False)
    state = json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())
    assert state["global_step"] == 3 and not state["finished"]
    monkeypatch.undo()
    changed = tiny_config(
        tmp_path / "r", tiny_checkpoint, shared_data, *args, "train.seed=7", "train.batch_size=1"
    )
    with pytest.raises(ValueError, match=r"cannot resume.*train\.batch_size: 2 -> 1.*train\.seed"):
        loop.run(changed, resume=True, progress=False)
    # where it logs and how often it saves may change; the run then finishes
    same = tiny_config(
        tmp_path / "r", tiny_checkpoint, shared_data, *args, "train.log_every_steps=2"
    )
    loop.run(same, resume=True, progress=False)
    assert json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())["finished"]


def test_resume_refuses_other_training_windows_but_not_a_moved_directory(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    """``data.dir`` may change on a resume (the data moved), so a relative ``data.train`` can
    then name another file, here one whose first answer moved to another span: the same
    windows' count and lengths, other labels. Refused by the windows' digest; the same file in
    a moved directory resumes."""
    data = json.loads((shared_data / MINI).read_text())
    for name in ("a", "moved"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "qa.json").write_text(json.dumps(data))
    par = data["data"][0]["paragraphs"][0]
    first = par["context"].split()[0]
    par["qas"][0]["answers"] = [{"text": first, "answer_start": 0}]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "qa.json").write_text(json.dumps(data))

    def config(data_dir: str):
        return tiny_config(
            tmp_path / "r",
            tiny_checkpoint,
            tmp_path / data_dir,
            "data.train=qa.json",
            f"data.eval={shared_data / MINI}",
            "train.max_steps=6",
        )

    interrupt_at_batch(monkeypatch, 3)
    loop.run(config("a"), progress=False)
    monkeypatch.undo()
    saved = json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())
    assert saved["global_step"] == 3 and saved["data_windows"] > 0
    with pytest.raises(ValueError, match=r"cannot resume, the training windows differ"):
        loop.run(config("b"), resume=True, progress=False)
    loop.run(config("moved"), resume=True, progress=False)
    final = json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())
    assert final["finished"] and final["data_fingerprint"] == saved["data_fingerprint"]


def test_resume_refuses_other_questions_choosing_best(
    tmp_path, tiny_checkpoint, shared_data, monkeypatch
):
    """An edited validation file: best/'s saved answers were to the old questions, and the
    calibration after training read them as answers to the new ones (a missing one as a
    blank). Refused by the digest of the questions that choose best/."""
    choose = tmp_path / "choose.json"
    choose.write_text((shared_data / MINI).read_text())
    cfg = tiny_config(
        tmp_path / "r", tiny_checkpoint, shared_data, f"data.eval={choose}", "train.max_steps=4"
    )
    interrupt_at_batch(monkeypatch, 2)
    loop.run(cfg, progress=False)
    monkeypatch.undo()
    saved = json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())
    assert len(saved["choice_fingerprint"]) == 16
    data = json.loads(choose.read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Who else?"
    choose.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"cannot resume, the questions that choose best/"):
        loop.run(cfg, resume=True, progress=False)
    choose.write_text((shared_data / MINI).read_text())  # the same questions again: it goes on
    loop.run(cfg, resume=True, progress=False)
    assert json.loads((tmp_path / "r" / "last" / "train_state.json").read_text())["finished"]
    choose.write_text(json.dumps(data))  # finished: its calibration and test still read best/
    with pytest.raises(ValueError, match=r"cannot resume, the questions that choose best/"):
        loop.run(cfg, resume=True, progress=False)


def test_the_test_after_a_resume_reads_the_data_where_it_is_now(
    tmp_path, tiny_checkpoint, shared_data
):
    """best/ keeps the config of the start that wrote it: once the data moved, the test after
    training looked for it in the old directory, and every later resume failed the same way."""
    from structqa.training import heldout

    before = tmp_path / "before"
    (before / "fixtures").mkdir(parents=True)
    shutil.copy(shared_data / MINI, before / MINI)
    shutil.copy(shared_data / MINI, before / "fixtures" / "validation.json")  # (not the test)
    args = ("data.validation=fixtures/validation.json", "train.max_steps=2")
    loop.run(tiny_config(tmp_path / "r", tiny_checkpoint, before, *args), progress=False)
    test = tmp_path / "r" / "best" / heldout.TEST_DIR
    assert (test / "metrics.json").is_file()
    shutil.rmtree(test)  # as if stopped before its test, then resumed from the moved data
    before.rename(tmp_path / "after")
    cfg = tiny_config(tmp_path / "r", tiny_checkpoint, tmp_path / "after", *args)
    assert heldout.score_best_once(cfg, None) is not None
    assert (test / "metrics.json").is_file()


def test_a_fresh_run_does_not_overwrite_one(tmp_path, tiny_checkpoint, shared_data, monkeypatch):
    cfg = tiny_config(tmp_path / "once", tiny_checkpoint, shared_data, "train.max_steps=2")
    loop.run(cfg, progress=False)
    before = (tmp_path / "once" / "last" / "model.safetensors").read_bytes()
    read = []  # refused before any data is read (featurizing a real file takes minutes)
    real = loop.prepare_data

    def counted(*a, **k):
        read.append(1)
        return real(*a, **k)

    monkeypatch.setattr(loop, "prepare_data", counted)
    with pytest.raises(ValueError, match=r"already holds a run \(best, last\).*--resume"):
        loop.run(cfg, progress=False)
    assert not read
    assert (tmp_path / "once" / "last" / "model.safetensors").read_bytes() == before


def test_cli_train_exits_130_when_interrupted(tmp_path, tiny_checkpoint, shared_data, monkeypatch):
    from tiny import mini_train_args

    out = tmp_path / "cli"
    argv = [*mini_train_args("train", shared_data, tiny_checkpoint, out, MINI, steps=6)]
    interrupt_at_batch(monkeypatch, 2)
    assert main([*argv, "--no-progress"]) == 130
    monkeypatch.undo()
    assert main([*argv, "--no-progress", "--resume"]) == 0
