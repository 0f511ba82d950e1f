"""The noun-phrase-preserving tokenizer: Table 1's words, exact offsets, embedding init, I/O."""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pytest
import torch

from structqa.encoders.bert import BertEncoder
from structqa.models.build import load_tokenizer
from structqa.pretrain.mlm_head import MaskedLM
from structqa.pretrain.np_tokenizer import (
    collect_np_words,
    extend_embeddings,
    extend_tokenizer,
    load_extended,
    np_word_spans,
    np_words,
    save_extended,
)
from structqa.text.annotate import Annotation

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

TABLE1 = ["COVID-19", "U.S.", "Ph.D.", "C++", "X-Files", "non-profit", "Sant’Egidio", "UTF-16"]
N_CONTEXTS = 200  # spaCy work stays small


@pytest.fixture(scope="module")
def base_tokenizer():
    from structqa.paths import default_encoder_path

    try:
        return load_tokenizer(default_encoder_path())
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(f"bundled encoder not available: {err}")


@pytest.fixture(scope="module")
def table1_tokenizer(base_tokenizer):
    return extend_tokenizer(base_tokenizer, TABLE1)


@pytest.fixture(scope="module")
def squad_contexts(shared_data: Path) -> list[str]:
    """The first N distinct contexts of splits/squad1-train, read as raw MRQA lines."""
    contexts: list[str] = []
    with gzip.open(shared_data / "splits/squad1-train.mrqa.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "context" in record and record["context"] not in contexts:
                contexts.append(record["context"])
            if len(contexts) == N_CONTEXTS:
                break
    return contexts


@pytest.fixture(scope="module")
def squad_annotations(squad_contexts):
    pytest.importorskip("spacy")
    from structqa.text.annotate import Annotator

    try:
        return Annotator().annotate(squad_contexts)
    except OSError as err:  # spaCy model not installed
        pytest.skip(f"spaCy model not available: {err}")


def _tokens(tokenizer, text: str) -> list[str]:
    return tokenizer.tokenize(text)


@pytest.mark.parametrize("word", TABLE1)
def test_table1_words_split_before_and_stay_whole_after(base_tokenizer, table1_tokenizer, word):
    assert len(_tokens(base_tokenizer, word)) > 1
    assert _tokens(table1_tokenizer, word) == [word.lower()]
    # in running text, case-insensitively, with sentence punctuation around it
    for variant in (word, word.upper(), word.lower()):
        text = f"The ({variant}), they said."
        enc = table1_tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        spans = [text[a:b] for a, b in enc["offset_mapping"]]
        assert variant in spans


def test_extended_vocabulary_ids_follow_the_old_ones(base_tokenizer, table1_tokenizer):
    n = len(base_tokenizer)
    ids = table1_tokenizer.convert_tokens_to_ids([w.lower() for w in TABLE1])
    assert ids == list(range(n, n + len(TABLE1)))
    assert len(table1_tokenizer) == table1_tokenizer.vocab_size == n + len(TABLE1)
    assert len(base_tokenizer) == n  # the original is left alone
    assert table1_tokenizer.decode(ids[:2]) == "covid-19 u.s."


def test_added_words_match_only_whole_words(table1_tokenizer):
    assert "u.s." not in _tokens(table1_tokenizer, "bu.s.y")
    assert "c++" not in _tokens(table1_tokenizer, "abc++")
    assert _tokens(table1_tokenizer, "non-profits") == ["non", "-", "profits"]


def test_np_words_keep_inner_and_strip_outer_punctuation():
    text = "The (COVID-19) crisis hit Ph.D. students at the U.S. non-profit's office."
    phrases = ["The (COVID-19) crisis", "Ph.D. students", "the U.S. non-profit's office"]
    ann = Annotation(noun_chunks=tuple((text.index(p), text.index(p) + len(p)) for p in phrases))
    assert np_words(text, ann) == [
        "The",
        "COVID-19",
        "crisis",
        "Ph.D.",
        "students",
        "the",
        "U.S.",
        "non-profit",
        "office",
    ]


def test_collect_np_words_ranks_split_noun_phrase_words(base_tokenizer):
    texts = ["The U.S. economy grew.", "U.S. and COVID-19 news.", "The COVID-19 virus, U.S."]
    chunks = [
        ((0, 16),),  # The U.S. economy
        ((0, 4), (9, 23)),  # U.S. | COVID-19 news
        ((0, 18), (20, 24)),  # The COVID-19 virus | U.S.
    ]
    anns = [Annotation(noun_chunks=c) for c in chunks]
    words = collect_np_words(texts, base_tokenizer, anns, min_count=2)
    assert words == ["u.s.", "covid-19"]  # 3 and 2 occurrences; whole words ("economy") left out
    assert collect_np_words(texts, base_tokenizer, anns, min_count=3) == ["u.s."]
    assert collect_np_words(texts, base_tokenizer, anns, min_count=1, max_new=1) == ["u.s."]


def _strip(s: str) -> str:
    s = unicodedata.normalize("NFD", s.lower())
    return "".join(c for c in s if not unicodedata.combining(c))


def test_offsets_stay_exact_on_squad_contexts(base_tokenizer, squad_contexts, squad_annotations):
    words = collect_np_words(squad_contexts, base_tokenizer, squad_annotations, min_count=1)
    assert len(words) > 50
    tok = extend_tokenizer(base_tokenizer, words)
    new_ids = set(tok.convert_tokens_to_ids(words))
    unk, vocab = tok.unk_token, tok.get_vocab()
    checked_words = 0
    for text, ann in zip(squad_contexts, squad_annotations, strict=True):
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
        tokens = tok.convert_ids_to_tokens(enc["input_ids"])
        for token, (a, b) in zip(tokens, enc["offset_mapping"], strict=True):
            assert b > a
            if token != unk:
                assert _strip(text[a:b]) == _strip(token.removeprefix("##")), (token, text[a:b])
        # every collected word occurring in the text is one token with its exact characters
        spans = {
            (a, b): i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        }
        for s, e in np_word_spans(text, ann):
            norm = tok.backend_tokenizer.normalizer.normalize_str(text[s:e])
            if vocab.get(norm, -1) in new_ids:
                assert spans.get((s, e)) == vocab[norm], text[s:e]
                checked_words += 1
    assert checked_words > 100


def test_new_embedding_is_the_mean_of_the_old_pieces(tiny_checkpoint):
    old = load_tokenizer(tiny_checkpoint)
    words = ["qu-est", "the.end"]
    pieces = [old(w, add_special_tokens=False)["input_ids"] for w in words]
    assert all(len(p) > 1 for p in pieces)
    new = extend_tokenizer(old, words)
    model = MaskedLM.from_pretrained(tiny_checkpoint)
    with torch.no_grad():
        model.head.bias.normal_()
    emb_before = model.encoder.embeddings.word_embeddings.weight.detach().clone()
    bias_before = model.head.bias.detach().clone()
    extend_embeddings(model, new, words, old)
    emb = model.encoder.embeddings.word_embeddings.weight
    n = len(old)
    assert emb.shape == (n + 2, emb_before.shape[1])
    assert model.encoder.config.vocab_size == n + 2
    assert model.head.decoder.weight is emb  # still tied
    assert model.head.bias.shape == (n + 2,)
    torch.testing.assert_close(emb[:n], emb_before)
    torch.testing.assert_close(model.head.bias[:n], bias_before)
    for k, ids in enumerate(pieces):
        torch.testing.assert_close(emb[n + k], emb_before[ids].mean(0))
        torch.testing.assert_close(model.head.bias[n + k], bias_before[ids].mean(0))
    ids = new("the qu-est", return_tensors="pt")["input_ids"]
    assert n in ids[0].tolist()
    out = model(ids)
    assert out.logits.shape == (1, ids.shape[1], n + 2)
    assert torch.isfinite(out.logits).all()


def test_save_and_load_keep_vocabulary_and_ids(tiny_checkpoint, tmp_path):
    old = load_tokenizer(tiny_checkpoint)
    words = ["qu-est", "the.end"]
    new = extend_tokenizer(old, words)
    model = MaskedLM.from_pretrained(tiny_checkpoint)
    extend_embeddings(model, new, words, old)
    save_extended(model, new, tmp_path / "ckpt")
    loaded, tok = load_extended(tmp_path / "ckpt")
    assert tok.get_vocab() == new.get_vocab()
    text = "The Qu-est and THE.END."
    assert tok(text)["input_ids"] == new(text)["input_ids"]
    assert (
        tok(text, return_offsets_mapping=True)["offset_mapping"]
        == new(text, return_offsets_mapping=True)["offset_mapping"]
    )
    torch.testing.assert_close(
        loaded.encoder.embeddings.word_embeddings.weight,
        model.encoder.embeddings.word_embeddings.weight,
    )
    torch.testing.assert_close(loaded.head.bias, model.head.bias)
    # a bare encoder loads from the same directory too
    encoder, _ = load_extended(tmp_path / "ckpt", mlm=False)
    assert isinstance(encoder, BertEncoder) and encoder.config.vocab_size == len(new)
    # the directory carries its manifest: an altered weights file is refused at loading
    from structqa.manifest import ManifestMismatch

    weights = tmp_path / "ckpt" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ManifestMismatch, match=r"model\.safetensors: its SHA-256"):
        load_extended(tmp_path / "ckpt")
