"""Masked-LM pre-training: a short run whose final/ fine-tunes, exact resume after SIGINT,
function-preserving block conversion at step 0, config validation, and fine-tuning (train,
evaluate, predict) of every pre-trained structure: stackings, attention variants, POS inputs."""

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
from tiny import mini_train_args, weights_sha256

from structqa.cli import main
from structqa.config import ConfigError, load_config
from structqa.encoders import (
    ANNA_BLOCK,
    attention_options,
    entity_keys_if,
    load_encoder,
)
from structqa.encoders.bert import BertEncoder
from structqa.features.batching import collate
from structqa.models.build import build_model, model_from_checkpoint
from structqa.prediction.predictor import Predictor
from structqa.pretrain import loop
from structqa.pretrain.config import load_pretrain_config
from structqa.pretrain.data import read_corpus, split_heldout
from structqa.pretrain.mlm_head import MaskedLM
from structqa.training import loop as training_loop
from structqa.training.data import prepare_data

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

MINI_SQUAD = "fixtures/squad-v1.1-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "anna"


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
            *mini_train_args("train", shared_data, final, tmp_path / "fine", MINI_SQUAD, steps=2),
            "--no-progress",
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
    # the same weights hash, as each checkpoint's manifest records it
    assert weights_sha256(tmp_path / "a" / "final") == weights_sha256(tmp_path / "b" / "final")
    steps = [x["step"] for x in read_log(tmp_path / "b") if "loss" in x]
    assert steps == [1, 2, 3, 4, 5, 6, 7]
    # each session's provenance: the interrupted one, then the resumed one
    sessions = [json.loads(x) for x in (tmp_path / "b" / "sessions.jsonl").read_text().splitlines()]
    assert [(x["resume"], x["global_step"], x["finished"]) for x in sessions] == [
        (False, 3, False),
        (True, 7, True),
    ]
    assert all(x["wall_seconds"] > 0 and "cpu" in x["machine"] for x in sessions)


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


def test_word_pos_adds_a_zero_pos_embedding_then_trains_it(tmp_path, tiny_checkpoint, corpus_dir):
    """word_pos masks as whole_word; its POS-tag embedding starts at zero, so the step-0 loss
    is whole_word's exactly, and it is trained and saved with the checkpoint."""
    common = ("train.max_steps=1", "model.dropout=0.0", "model.attention_dropout=0.0")
    logs = {}
    for scheme in ("whole_word", "word_pos"):
        cfg = tiny_config(
            tmp_path / scheme, tiny_checkpoint, corpus_dir, *common, f"masking.scheme={scheme}"
        )
        loop.run(cfg, progress=False)
        logs[scheme] = read_log(tmp_path / scheme)
    step0 = {k: next(x["eval"] for x in v if x.get("step") == 0) for k, v in logs.items()}
    assert step0["word_pos"] == step0["whole_word"] and step0["word_pos"]["masked_tokens"] > 0
    first = {k: [x["loss"] for x in v if "loss" in x][0] for k, v in logs.items()}
    assert first["word_pos"] == first["whole_word"]

    final = tmp_path / "word_pos" / "final"
    assert json.loads((final / "config.json").read_text())["structqa_pos_vocab_size"] == 19
    table = load_file(str(final / "model.safetensors"))["bert.embeddings.pos_tag_embeddings.weight"]
    assert table.shape == (19, 32) and table.any()  # one step moved it from zero
    assert load_encoder(tmp_path / "whole_word" / "final").embeddings.pos_tag_embeddings is None
    # continued pre-training keeps the table, whatever the scheme
    again = tiny_config(tmp_path / "again", final, corpus_dir, "masking.scheme=token")
    model, _ = loop.build_pretrain_model(again)
    assert torch.equal(model.encoder.embeddings.pos_tag_embeddings.weight, table)


def test_unknown_key_names_the_nearest(capsys):
    assert main(["pretrain", "--train.max_step=3"]) == 2
    err = capsys.readouterr().err
    assert "train.max_step" in err and "'max_steps'" in err
    with pytest.raises(ConfigError, match="did you mean 'scheme'"):
        load_pretrain_config(overrides=["masking.schema=anna"])
    with pytest.raises(ConfigError, match="'nouns' is not one of .*did you mean 'noun_phrase'"):
        load_pretrain_config(overrides=["masking.scheme=nouns"])


def test_anna_configs_share_the_budget():
    base = load_pretrain_config(CONFIGS / "pretrain-token-mlm.yaml")
    anna = load_pretrain_config(CONFIGS / "pretrain-anna.yaml")
    word_pos = load_pretrain_config(CONFIGS / "pretrain-word-pos.yaml")
    assert (base.model.block, base.masking.scheme) == (["sa", "ffn"], "token")
    assert (anna.model.block, anna.masking.scheme) == (list(ANNA_BLOCK), "anna")
    assert (word_pos.model.block, word_pos.masking.scheme) == (["sa", "ffn"], "word_pos")
    budget = ("max_steps", "batch_size", "grad_accum", "lr", "warmup_ratio", "weight_decay", "seed")
    for arm in (anna, word_pos):
        assert base.data == arm.data and base.data.corpus == "runs/anna/corpus"
        for key in budget:
            assert getattr(base.train, key) == getattr(arm.train, key), key
        assert base.train.output_dir != arm.train.output_dir


# ---- fine-tuning keeps the pre-trained structure ----------------------------------------------

#: pretrain overrides of each structure, and the token tags fine-tuning must then compute
STRUCTURES = {
    "sa-naa-ffn": (("model.block=[sa, naa, ffn]", "masking.scheme=anna"), []),
    "naa-ffn": (("model.block=[naa, ffn]",), []),
    "relative": (
        ("model.relative_keys=true", "model.relative_values=true", "model.max_distance=4"),
        [],
    ),
    "entity": (("model.entity_bias=true", "masking.scheme=entity"), ["entities"]),
    "word_pos": (("masking.scheme=word_pos",), ["pos"]),
}
VARIANT_PARAMS = ("pos_tag_embeddings", "entity_bias", "rel_keys", "rel_values")


def shapes(encoder: BertEncoder) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in encoder.state_dict().items()}


def encode(encoder: BertEncoder, batch) -> torch.Tensor:
    """Last hidden states of a fine-tuning batch, with the token tags it carries."""
    encoder.eval()
    with torch.no_grad(), entity_keys_if(encoder, batch.entity_mask):
        out = encoder(
            batch.input_ids,
            batch.attention_mask,
            batch.token_type_ids,
            pos_tag_ids=batch.pos_tag_ids,
        )
    return out.last_hidden_state


@pytest.fixture(scope="module")
def spacy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One parse cache for every fine-tuning run below: spaCy parses the fixture once."""
    return tmp_path_factory.mktemp("spacy") / "annotations.jsonl"


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_finetuning_keeps_the_pretrained_structure(
    structure, tmp_path, tiny_checkpoint, corpus_dir, shared_data, spacy_cache
):
    """pretrain 2 steps -> build the QA model -> train 2 steps -> evaluate -> predict: the
    encoder is the pre-trained architecture at every stage, and a checkpoint's encoder
    computes what the trained one did."""
    overrides, tags = STRUCTURES[structure]
    pre = tmp_path / "pre"
    loop.run(
        tiny_config(pre, tiny_checkpoint, corpus_dir, "train.max_steps=2", *overrides),
        progress=False,
    )
    pretrained = load_encoder(pre / "final")

    fine = tmp_path / "fine"
    cfg = load_config(
        overrides=[
            f"model.encoder={pre / 'final'}",
            f"data.dir={shared_data}",
            f"data.train={MINI_SQUAD}",
            f"data.eval={MINI_SQUAD}",
            "data.train_size=all",
            f"data.annotation_cache={spacy_cache}",
            f"train.output_dir={fine}",
            "train.max_steps=2",
            "train.bf16=off",
        ]
    )
    model, tokenizer = build_model(cfg)
    assert cfg.data.token_tags == tags  # resolved from the encoder
    assert shapes(model.encoder) == shapes(pretrained)
    assert attention_options(model.encoder) == attention_options(pretrained)
    data = prepare_data(cfg, tokenizer)
    batch = collate(data.eval_features, list(range(len(data.eval_features))))
    assert (batch.pos_tag_ids is not None) == ("pos" in tags)
    assert (batch.entity_mask is not None) == ("entities" in tags)
    if tags:  # the fixture's questions and contexts do have tagged tokens
        assert bool((batch.pos_tag_ids if "pos" in tags else batch.entity_mask).any())
    # fine-tuning starts from the pre-trained function
    assert torch.equal(encode(model.encoder, batch), encode(pretrained, batch))

    training_loop.train(cfg, model, tokenizer, data, progress=False)
    loaded, _, loaded_cfg = model_from_checkpoint(fine / "last")
    assert loaded_cfg.data.token_tags == tags
    assert shapes(loaded.encoder) == shapes(pretrained)
    assert torch.equal(encode(loaded.encoder, batch), encode(model.encoder, batch))
    trained = dict(loaded.encoder.named_parameters())
    for name, value in pretrained.named_parameters():
        if any(v in name for v in VARIANT_PARAMS):  # the variant's own weights are trained
            assert not torch.equal(trained[name], value), name

    evaluated = tmp_path / "eval"
    args = ["evaluate", str(fine / "last"), f"--data={shared_data}", f"--out={evaluated}"]
    assert main([*args, "--bf16=off"]) == 0
    assert "f1" in json.loads((evaluated / "metrics.json").read_text())
    predictions = json.loads((evaluated / "predictions.json").read_text())
    predictor = Predictor.from_checkpoint(fine / "last", bf16="off")
    example = data.eval_examples[0]
    answer = predictor.predict(example.question, example.context)
    assert answer.text == predictions[example.id]


def test_np_vocabulary_is_added_whole_saved_and_rebuilt_on_resume(tmp_path, tiny_checkpoint):
    """model.np_vocab (Table 5): noun-phrase words of the training chunks join the vocabulary
    whole; final/ holds the extended tokenizer and embeddings; resume rebuilds the same ids."""
    from structqa.pretrain.np_tokenizer import load_extended

    pytest.importorskip("spacy")
    from structqa.text.annotate import Annotator

    sentences = [
        "The COVID-19 vaccine reached the U.S. market after a long Ph.D. study.",
        "A non-profit group in the U.S. tracked COVID-19 cases for the X-Files fans.",
        "Her Ph.D. thesis on COVID-19 helped a non-profit clinic in the U.S. city.",
    ]
    records = [
        {"id": f"np-{i}", "text": f"{sentences[i % 3]} Chunk number {i} ends here."}
        for i in range(15)
    ]
    corpus = tmp_path / "np-corpus"
    corpus.mkdir()
    (corpus / "corpus-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    annotations = Annotator().annotate(r["text"] for r in records)
    (corpus / "annotations-00000.jsonl").write_text(
        "".join(
            json.dumps({"id": r["id"], **a.to_dict()}) + "\n"
            for r, a in zip(records, annotations, strict=True)
        )
    )
    args = ("model.np_vocab=20", "model.np_min_count=1", "train.max_steps=2")
    cfg = tiny_config(tmp_path / "np", tiny_checkpoint, corpus, *args)
    assert loop.run(cfg, progress=False) is not None
    words = json.loads((tmp_path / "np" / "np_vocab.json").read_text())
    assert 0 < len(words) <= 20
    report = json.loads((tmp_path / "np" / "data_report.json").read_text())
    assert report["np_vocab_added"] == len(words)
    model, tokenizer = load_extended(tmp_path / "np" / "final")
    base_size = len(load_encoder(tiny_checkpoint).embeddings.word_embeddings.weight)
    assert model.encoder.config.vocab_size == len(tokenizer) == base_size + len(words)
    for word in words:  # each is one token now, with an id past the old vocabulary
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and ids[0] >= base_size, word
    # a resumed session rebuilds the vocabulary from the corpus: the same words, same order
    fresh_model, base_tokenizer = loop.build_pretrain_model(cfg)
    rebuilt: dict[str, list[str]] = {}

    def collect(chunks):
        tok, rebuilt["words"] = loop.add_np_vocabulary(cfg, fresh_model, base_tokenizer, chunks)
        return tok

    loop.prepare_pretrain_data(cfg, base_tokenizer, on_train_chunks=collect)
    assert rebuilt["words"] == words
    # --resume of the finished run rebuilds the model from np_vocab.json and loads last/
    # into it (a vocabulary of another size would not load)
    (tmp_path / "np" / "np_vocab.json").write_text(json.dumps(words))
    assert loop.run(cfg, resume=True, progress=False) is None  # already finished
    assert json.loads((tmp_path / "np" / "np_vocab.json").read_text()) == words


def test_param_lr_zero_freezes_the_matching_parameters(tmp_path, tiny_checkpoint, corpus_file):
    cfg = tiny_config(
        tmp_path / "frozen",
        tiny_checkpoint,
        corpus_file,
        "train.max_steps=2",
        "train.param_lr=encoder.embeddings.position_embeddings.weight:0",
    )
    loop.run(cfg, progress=False)
    # (the tiny checkpoint is a BertModel; pre-training saves a BertForMaskedLM, "bert." first)
    before = load_file(str(tiny_checkpoint / "model.safetensors"))
    after = load_file(str(tmp_path / "frozen" / "final" / "model.safetensors"))
    key = "embeddings.position_embeddings.weight"
    assert torch.equal(after[f"bert.{key}"], before[key])
    moved = "embeddings.word_embeddings.weight"
    assert not torch.equal(after[f"bert.{moved}"], before[moved])  # the rest trained


def test_freeze_steps_hold_the_encoder_while_the_fresh_head_trains(
    tmp_path, tiny_checkpoint, corpus_file
):
    # (pre-training saves a BertForMaskedLM, which has no pooler)
    before = {
        k: v
        for k, v in load_file(str(tiny_checkpoint / "model.safetensors")).items()
        if not k.startswith("pooler.")
    }

    def pretrain(name: str, freeze_steps: int) -> tuple[dict, list[dict]]:
        cfg = tiny_config(
            tmp_path / name,
            tiny_checkpoint,
            corpus_file,
            "train.max_steps=3",
            f"train.freeze_steps={freeze_steps}",
        )
        loop.run(cfg, progress=False)
        final = load_file(str(tmp_path / name / "final" / "model.safetensors"))
        return final, [e["eval"] for e in read_log(tmp_path / name) if "eval" in e]

    held, evals = pretrain("held", 3)
    # every encoder weight (the tied decoder weight is the word embedding) is bit for bit the
    # checkpoint's, while the fresh head trained: the held-out MLM loss moved
    assert {f"bert.{k}" for k in before} <= set(held)
    for key, value in before.items():
        assert torch.equal(held[f"bert.{key}"], value), key
    assert evals[-1]["mlm_loss"] != pytest.approx(evals[0]["mlm_loss"], abs=1e-6)
    # held for 2 of 3 steps: the third step moves the encoder
    moved, _ = pretrain("moved", 2)
    assert any(not torch.equal(moved[f"bert.{k}"], v) for k, v in before.items())
    with pytest.raises(ConfigError, match="freeze_steps must be >= 0"):
        tiny_config(tmp_path / "bad", tiny_checkpoint, corpus_file, "train.freeze_steps=-1")
