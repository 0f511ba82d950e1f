"""The pre-training corpus pipeline: each filter, chunking, exclusion, shards and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.pretrain.corpus import (
    CorpusConfig,
    Exclusion,
    build_corpus,
    chunk_sentences,
    clean_noise,
    normalize,
    read_corpus,
)
from structqa.text.annotate import Annotator, text_key

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def sentence(tag: str) -> str:
    """A 13-word sentence, unique by ``tag``."""
    return f"Sentence {tag} tells a short story about the river and the old mill."


def document(prefix: str, n: int) -> str:
    return " ".join(sentence(f"{prefix}{WORDS[i]}") for i in range(n))


@pytest.fixture(scope="module")
def annotator(tmp_path_factory: pytest.TempPathFactory) -> Annotator:
    pytest.importorskip("spacy")
    ann = Annotator(cache_file=tmp_path_factory.mktemp("spacy") / "cache.jsonl")
    try:
        ann.nlp  # noqa: B018 (load now, so a missing model skips)
    except OSError as err:
        pytest.skip(f"spaCy model not available: {err}")
    return ann


def test_chunk_sentences_packs_greedily_and_overlaps_by_sentences():
    assert chunk_sentences([100, 150, 100, 400, 20, 20], 300) == [
        range(0, 2),
        range(2, 3),
        range(3, 4),  # longer than the limit: a chunk of its own
        range(4, 6),
    ]
    assert chunk_sentences([100, 100, 100, 100, 100], 300, overlap=1) == [
        range(0, 3),
        range(2, 5),
    ]
    # an overlap as long as the chunk still moves forward
    assert chunk_sentences([200, 200, 200], 300, overlap=5) == [
        range(0, 1),
        range(1, 2),
        range(2, 3),
    ]
    assert chunk_sentences([], 300) == []


def test_clean_noise_cuts_each_kind_and_counts_it():
    counts: dict[str, int] = {}
    text = (
        "See https://example.org/a?b=1 or www.example.com for more.\n"
        "==========\n"
        "Run /usr/local/bin/python or C:\\Windows\\System32 at 5 km/h, 1/2 of the time.\n"
        "<p>Bold <b>text</b></p> <!-- note --> [PAR] end ----- done"
    )
    out = clean_noise(text, counts)
    assert counts == {"url": 2, "path": 2, "separator": 2, "html": 5, "marker": 1}
    assert out == ("See or for more.\n\nRun or at 5 km/h, 1/2 of the time.\nBold text end done")
    same: dict[str, int] = {}
    assert clean_noise("A clean sentence, C++ and U.S. stay.", same) == (
        "A clean sentence, C++ and U.S. stay."
    )
    assert same == {}


def test_exclusion_finds_contained_passages_and_shared_sentences():
    held = "The Broncos won Super Bowl 50 in Santa Clara, California."
    ex = Exclusion([held], [held])
    assert ex.contains_passage("Intro. THE broncos won Super Bowl 50 in Santa Clara (California)!")
    assert not ex.contains_passage("The Broncos won Super Bowl 50 in Santa Clara.")
    assert ex.shares_sentence(
        ["Other words here.", "the Broncos won Super Bowl 50 in Santa Clara, California"]
    )
    assert not ex.shares_sentence(["The Broncos lost."])
    assert normalize("Ph.D.  in   U.S.") == "ph d in u s"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, annotator: Annotator, shared_data: Path):
    src = tmp_path_factory.mktemp("src")
    held_out = document("held", 3)
    leaky = sentence("heldalpha")  # one held-out sentence inside an otherwise clean document
    text_docs = [
        document("a", 10),  # 130 words -> 3 chunks of <= 50 words
        "Too short. " + document("b", 3),  # 39 words: a short document
        document("a", 10),  # a duplicate
        "Visit https://example.org now. It is. " + document("c", 8),  # noise, a short sentence
        "Intro words. " + held_out + " " + document("d", 6),  # contains a held-out passage
        document("e", 6) + " " + leaky + " " + document("f", 2),  # shares a held-out sentence
    ]
    (src / "docs.txt").write_text("\n\n".join(text_docs) + "\n", encoding="utf-8")
    (src / "more.jsonl").write_text(
        json.dumps({"id": "x", "text": document("g", 9)}) + "\n", encoding="utf-8"
    )
    (src / "held.jsonl").write_text(json.dumps({"text": held_out}) + "\n", encoding="utf-8")
    sources = [src / "docs.txt", src / "more.jsonl", shared_data / "drop/drop-mini.json"]
    config = CorpusConfig(chunk_words=50, min_doc_words=60, progress=False)
    out = tmp_path_factory.mktemp("corpus")
    report = build_corpus(sources, out, config, exclude=[src / "held.jsonl"], annotator=annotator)
    return report, out, sources, config, src


def test_build_corpus_counts_every_step(built):
    report, out, *_ = built
    c = report.counts
    assert c["documents_in"] == 6 + 1 + 3
    assert c["duplicate_passages"] == 1
    assert c["excluded_passages"] == 1
    assert report.noise == {"url": 1}
    assert c["short_sentences"] >= 3  # "Too short.", "Visit now.", "It is."
    assert c["short_documents"] == 1
    assert c["excluded_chunks"] == 1
    assert c["chunks_written"] == c["chunks"] - c["excluded_chunks"] - c["duplicate_chunks"]
    assert c["shards"] == 1 and report.shards == ["corpus-00000.jsonl"]
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["counts"] == c and on_disk["config"]["chunk_words"] == 50
    assert on_disk["exclusions"]["passages"] == 1


def test_chunks_are_clean_bounded_and_annotated(built):
    report, out, *_ = built
    chunks = list(read_corpus(out))
    assert len(chunks) == report.counts["chunks_written"]
    texts = [t for _, t, _ in chunks]
    assert len(set(map(normalize, texts))) == len(texts)
    assert not any("Sentence held" in t or "example.org" in t or "Too short" in t for t in texts)
    assert [t for t in texts if "Sentence aalpha" in t]  # the first document is in
    for _cid, text, ann in chunks:
        assert len(text.split()) <= 50 or len(ann.sentences) == 1
        assert " ".join(text[s:e] for s, e in ann.sentences) == text
        for s, e in ann.words:
            assert text[s:e].strip() == text[s:e] != ""
        assert len(ann.pos) == len(ann.words)
    records = [json.loads(line) for line in (out / "corpus-00000.jsonl").open()]
    assert {r["source"] for r in records} == {"docs.txt", "more.jsonl", "drop-mini.json"}
    assert records[0]["id"] == "docs.txt:0:0"


def test_annotations_file_serves_as_an_annotator_cache(built, annotator):
    _, out, *_ = built
    cache = Annotator(annotator.model, cache_file=out / "annotations-00000.jsonl")
    chunks = list(read_corpus(out))
    assert len(cache) == len(chunks)
    got = cache.annotate([t for _, t, _ in chunks])
    assert cache.misses == 0 and got == [a for _, _, a in chunks]
    assert all(text_key(t) for _, t, _ in chunks)


def test_build_is_deterministic_and_replaces_stale_shards(built, annotator, tmp_path):
    report, out, sources, config, src = built
    again = build_corpus(
        sources, tmp_path, config, exclude=[src / "held.jsonl"], annotator=annotator
    )
    assert again.counts == report.counts
    for name in ("corpus-00000.jsonl", "annotations-00000.jsonl"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes()
    # two shards, then one: the second must not survive
    small = CorpusConfig(chunk_words=50, min_doc_words=60, progress=False, shard_chunks=3)
    build_corpus(sources, tmp_path, small, annotator=annotator)
    assert (tmp_path / "corpus-00001.jsonl").exists()
    build_corpus(sources, tmp_path, config, annotator=annotator)
    assert sorted(p.name for p in tmp_path.glob("corpus-*.jsonl")) == ["corpus-00000.jsonl"]


def test_sources_of_one_file_name_keep_every_chunk_and_its_own_annotation(annotator, tmp_path):
    """Document ids are made from file names: a second ``notes.txt`` gets its source's
    number, so pre-training reads both, each chunk with the parse of its own text."""
    from structqa.pretrain.data import read_corpus as read_for_pretraining

    for folder, prefix in (("a", "a"), ("b", "g")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.txt").write_text(document(prefix, 5), encoding="utf-8")
    sources = [tmp_path / "a" / "notes.txt", tmp_path / "b" / "notes.txt"]
    config = CorpusConfig(chunk_words=100, min_doc_words=60, progress=False)
    report = build_corpus(sources, tmp_path / "out", config, annotator=annotator)
    assert report.counts["renamed_ids"] == 1 and report.counts["chunks_written"] == 2
    chunks = read_for_pretraining(tmp_path / "out")
    assert [c.id for c in chunks] == ["notes.txt:0:0", "notes.txt@2:0:0"]
    for c in chunks:
        assert " ".join(c.text[s:e] for s, e in c.annotation.sentences) == c.text
    # annotation shards of another build beside these corpus shards: refused, named
    shard = tmp_path / "out" / "annotations-00000.jsonl"
    lines = shard.read_text().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    shard.write_text(json.dumps({**second, "id": first["id"]}) + "\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match="corpus-00000.jsonl:1: chunk 'notes.txt:0:0'.*another"):
        read_for_pretraining(tmp_path / "out")


def test_overlapping_chunks_share_sentences(built, annotator, tmp_path):
    _, _, sources, _, _ = built
    config = CorpusConfig(chunk_words=50, min_doc_words=60, overlap=1, progress=False)
    report = build_corpus(sources[:1], tmp_path, config, annotator=annotator)
    first = [t for cid, t, _ in read_corpus(tmp_path) if cid.startswith("docs.txt:0:")]
    # 13-word sentences, 3 per chunk, one shared: 0-2, 2-4, 4-6, 6-8, 8-9
    assert len(first) == 5
    assert report.counts["chunks_written"] >= 5
    sents = [[x.strip() for x in t.split(".") if x.strip()] for t in first]
    assert [len(x) for x in sents] == [3, 3, 3, 3, 2]
    for a, b in zip(sents, sents[1:], strict=False):
        assert a[-1] == b[0]


def test_squad_articles_are_one_document(shared_data, annotator, tmp_path):
    from structqa.pretrain.corpus import read_documents

    fmt, docs = read_documents(shared_data / "fixtures/squad-v1.1-mini.json", CorpusConfig())
    raw = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text())
    assert len(docs) == len(raw["data"])
    assert [len(d.passages) for d in docs] == [len(a["paragraphs"]) for a in raw["data"]]
    _, by_context = read_documents(
        shared_data / "fixtures/squad-v1.1-mini.json", CorpusConfig(group_by_title=False)
    )
    assert len(by_context) == sum(len(a["paragraphs"]) for a in raw["data"])


def test_cli_corpus(built, annotator, tmp_path, monkeypatch):
    from structqa.cli import main

    _, _, sources, _, src = built
    monkeypatch.setattr("structqa.pretrain.corpus.Annotator", lambda *a, **k: annotator)
    code = main(
        ["corpus", "--out", str(tmp_path), str(sources[0]), "--exclude", str(src / "held.jsonl")]
        + ["--chunk-words", "50", "--min-doc-words", "60", "--no-progress"]
    )
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["counts"]["excluded_passages"] == 1
    assert report["config"]["min_doc_words"] == 60


def test_a_rebuild_stopped_while_writing_leaves_the_earlier_corpus_whole(
    built, annotator, tmp_path, monkeypatch
):
    """A rebuild that stops while writing its shards (here: the disk fills at the second file)
    must leave the earlier build readable as it was; one stopped while moving them in is
    refused by ``read_corpus``, and the next build clears what the stopped one left."""
    import structqa.pretrain.corpus as corpus

    report, out, sources, config, src = built
    build_corpus(sources, tmp_path, config, annotator=annotator)
    before = list(read_corpus(tmp_path))
    small = CorpusConfig(chunk_words=50, min_doc_words=60, progress=False, shard_chunks=3)
    real_write = corpus.write_text
    calls = {"n": 0}

    def disk_full(path, text):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real_write(path, text)

    monkeypatch.setattr(corpus, "write_text", disk_full)
    with pytest.raises(OSError):
        build_corpus(sources, tmp_path, small, annotator=annotator)
    monkeypatch.setattr(corpus, "write_text", real_write)
    assert list(read_corpus(tmp_path)) == before
    assert sorted(p.name for p in tmp_path.glob("corpus-*.jsonl")) == ["corpus-00000.jsonl"]

    real_replace = corpus.os.replace

    def stop_midway(a, b):
        if Path(b) == tmp_path / "corpus-00001.jsonl":  # the move, not a write into .incoming
            raise KeyboardInterrupt
        real_replace(a, b)

    monkeypatch.setattr(corpus.os, "replace", stop_midway)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(sources, tmp_path, small, annotator=annotator)
    monkeypatch.setattr(corpus.os, "replace", real_replace)
    with pytest.raises(ValueError, match="stopped while moving its shards in"):
        list(read_corpus(tmp_path))
    again = build_corpus(sources, tmp_path, small, annotator=annotator)
    assert len(list(read_corpus(tmp_path))) == again.counts["chunks_written"]
    assert not (tmp_path / ".incoming").exists()
