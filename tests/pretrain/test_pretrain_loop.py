"""Masked-LM pre-training: a short run whose final/ fine-tunes, exact resume after SIGINT,
function-preserving block conversion at step 0, config validation."""

from __future__ import annotations

import json
import math
import os
import re
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from structqa.cli import main
from structqa.config import ConfigError
from structqa.encoders.bert import BertEncoder
from structqa.encoders.stacking import ANNA_BLOCK, load_encoder
from structqa.pretrain import loop
from structqa.pretrain.config import load_pretrain_config
from structqa.pretrain.data import read_corpus, split_heldout
from structqa.pretrain.mlm_head import MaskedLM

MINI_SQUAD = "fixtures/squad-v1.1-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "anna"


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def mini_chunks(data_dir: Path) -> list[dict]:
    """The sentences of the mini fixture's contexts and its questions, as corpus records."""
    data = json.loads((data_dir / MINI_SQUAD).read_text(encoding="utf-8"))
    texts: list[str] = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            texts.extend(s for s in re.split(r"(?<=\.) ", paragraph["context"]) if s.strip())
            texts.extend(qa["question"] for qa in paragraph["qas"])
    return [{"id": f"mini-{i}", "text": t, "source": "mini"} for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "mini.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mini_chunks(shared_data)))
    return path


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The layout `structqa corpus` writes: corpus and annotation shards keyed by chunk id."""
    pytest.importorskip("spacy")
    from structqa.text.annotate import Annotator

    records = mini_chunks(shared_data)
    out = tmp_path_factory.mktemp("corpus-dir")
    annotations = Annotator().annotate(r["text"] for r in records)
    for shard, part in enumerate((slice(0, len(records) // 2), slice(len(records) // 2, None))):
        with open(out / f"corpus-{shard:05d}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records[part])
        with open(out / f"annotations-{shard:05d}.jsonl", "w") as f:
            for r, a in zip(records[part], annotations[part], strict=True):
                f.write(json.dumps({"id": r["id"], **a.to_dict()}) + "\n")
    return out


def tiny_config(out: Path, ckpt: Path, corpus: Path, *extra: str):
    return load_pretrain_config(
        overrides=[
            f"model.encoder={ckpt}",
            f"data.corpus={corpus}",
            "data.heldout_fraction=0.2",
            "data.max_seq_len=64",
            "masking.scheme=token",
            f"train.output_dir={out}",
            "train.batch_size=2",
            "train.eval_batch_size=4",
            "train.lr=1e-3",
            "train.warmup_ratio=0.2",
            "train.bf16=off",
            "train.log_every_steps=1",
            *extra,
        ]
    )


def read_log(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_pretrain_anna_then_finetune(tmp_path, tiny_checkpoint, corpus_dir, shared_data):
    run = tmp_path / "pre"
    cfg = tiny_config(
        run,
        tiny_checkpoint,
        corpus_dir,
        "model.block=[sa, naa, ffn]",
        "masking.scheme=anna",
        "train.max_steps=6",
        "train.eval_every_steps=3",
    )
    result = loop.run(cfg, progress=False)
    assert result is not None and result.masked_tokens > 0
    assert 0.0 <= result.accuracy <= 1.0 and math.isfinite(result.loss)
    report = json.loads((run / "data_report.json").read_text())
    assert report["annotated_in_corpus"] == report["chunks"]  # read from the shards
    assert report["heldout_chunks"] >= 1

    log = read_log(run)
    losses = [x["loss"] for x in log if "loss" in x]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    evals = [x for x in log if "eval" in x]
    assert [x["step"] for x in evals] == [0, 3, 6]
    assert evals[-1]["eval"]["mlm_accuracy"] == pytest.approx(result.accuracy)
    assert json.loads((run / "final" / "metrics.json").read_text())["mlm_loss"] == pytest.approx(
        result.loss
    )

    final = run / "final"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (final / name).exists(), name
    weights = load_file(str(final / "model.safetensors"))
    assert "cls.predictions.transform.dense.weight" in weights  # the MLM head, under HF names
    encoder = BertEncoder.from_pretrained(final)
    assert encoder.config.block == ANNA_BLOCK
    # every encoder weight came from the file: identical to the pre-trained model's encoder
    trained = MaskedLM.from_pretrained(final).encoder.state_dict()
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(tensor, trained[name]), name

    code = main(
        [
            "train",
            "--no-progress",
            f"--data={shared_data}",
            f"--model.encoder={final}",
            f"--data.train={MINI_SQUAD}",
            f"--data.eval={MINI_SQUAD}",
            "--data.train_size=all",
            f"--train.output_dir={tmp_path / 'fine'}",
            "--train.max_steps=2",
            "--train.bf16=off",
        ]
    )
    assert code == 0
    saved = json.loads((tmp_path / "fine" / "best" / "encoder_config.json").read_text())
    assert tuple(saved["block"]) == ANNA_BLOCK


def test_resume_after_sigint_is_exact(tmp_path, tiny_checkpoint, corpus_file, monkeypatch):
    args = ("train.max_steps=7", "train.save_every_steps=5", "train.eval_every_steps=2")
    straight = tiny_config(tmp_path / "a", tiny_checkpoint, corpus_file, *args)
    loop.run(straight, progress=False)
    expected = load_file(str(tmp_path / "a" / "final" / "model.safetensors"))
    # the 7 steps of 2 windows span more than one epoch (masks of epoch 1 are used)
    train_chunks, _ = split_heldout(read_corpus(corpus_file), 0.2)
    assert len(train_chunks) < 14

    calls = {"n": 0}
    real_forward = loop._forward

    def forward_then_interrupt(model, raw_model, batch):
        if model.training:  # training steps only, not held-out evaluation
            calls["n"] += 1
            if calls["n"] == 3:
                os.kill(os.getpid(), signal.SIGINT)
        return real_forward(model, raw_model, batch)

    monkeypatch.setattr(loop, "_forward", forward_then_interrupt)
    interrupted = tiny_config(tmp_path / "b", tiny_checkpoint, corpus_file, *args)
    assert loop.run(interrupted, progress=False) is None
    state = json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())
    assert state["global_step"] == 3 and not state["finished"]
    assert not (tmp_path / "b" / "final").exists()

    monkeypatch.setattr(loop, "_forward", real_forward)
    assert loop.run(interrupted, resume=True, progress=False) is not None
    resumed = load_file(str(tmp_path / "b" / "final" / "model.safetensors"))
    assert json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())["finished"]
    assert expected.keys() == resumed.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed[name]), name
    steps = [x["step"] for x in read_log(tmp_path / "b") if "loss" in x]
    assert steps == [1, 2, 3, 4, 5, 6, 7]


def test_anna_block_keeps_the_step0_mlm_loss(tmp_path, tiny_checkpoint, corpus_file):
    common = ("train.max_steps=1", "model.dropout=0.0", "model.attention_dropout=0.0")
    logs = {}
    for name, block in (("bert", "null"), ("anna", "[sa, naa, ffn]")):
        cfg = tiny_config(
            tmp_path / name, tiny_checkpoint, corpus_file, *common, f"model.block={block}"
        )
        loop.run(cfg, progress=False)
        logs[name] = read_log(tmp_path / name)
    assert load_encoder(tmp_path / "anna" / "final").config.block == ANNA_BLOCK
    step0 = {k: next(x["eval"] for x in v if x.get("step") == 0) for k, v in logs.items()}
    assert step0["anna"]["masked_tokens"] == step0["bert"]["masked_tokens"] > 0
    assert step0["anna"]["mlm_loss"] == pytest.approx(step0["bert"]["mlm_loss"], rel=1e-5)
    assert step0["anna"]["mlm_accuracy"] == step0["bert"]["mlm_accuracy"]
    # the first training step sees the same function, so the same loss
    first = {k: [x["loss"] for x in v if "loss" in x][0] for k, v in logs.items()}
    assert first["anna"] == pytest.approx(first["bert"], rel=1e-5)


def test_unknown_key_names_the_nearest(capsys):
    assert main(["pretrain", "--train.max_step=3"]) == 2
    err = capsys.readouterr().err
    assert "train.max_step" in err and "'max_steps'" in err
    with pytest.raises(ConfigError, match="did you mean 'scheme'"):
        load_pretrain_config(overrides=["masking.schema=anna"])
    with pytest.raises(ConfigError, match="unknown masking scheme"):
        load_pretrain_config(overrides=["masking.scheme=nouns"])


def test_anna_configs_share_the_budget():
    base = load_pretrain_config(CONFIGS / "pretrain-token-mlm.yaml")
    anna = load_pretrain_config(CONFIGS / "pretrain-anna.yaml")
    assert (base.model.block, base.masking.scheme) == (["sa", "ffn"], "token")
    assert (anna.model.block, anna.masking.scheme) == (list(ANNA_BLOCK), "anna")
    assert base.data == anna.data and base.data.corpus == "runs/anna/corpus"
    budget = ("max_steps", "batch_size", "grad_accum", "lr", "warmup_ratio", "weight_decay", "seed")
    for key in budget:
        assert getattr(base.train, key) == getattr(anna.train, key), key
    assert base.train.output_dir != anna.train.output_dir
