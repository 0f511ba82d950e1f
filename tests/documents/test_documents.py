"""Document collections: files read into chunks with their offsets, an index on disk updated
by content hash, BM25 / dense / hybrid search, and the BEIR metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.readers import read_extractive
from structqa.documents import DocumentIndex, combine, fuse
from structqa.documents.ingest import (
    Document,
    chunk_document,
    read_documents,
    sentence_spans,
)
from structqa.documents.metrics import ndcg_at, read_qrels, recall_at, score_runs

BEES = (
    "Honey bees communicate through a waggle dance. The dance tells other bees the direction "
    "and distance of flowers. A colony can hold tens of thousands of workers."
)
VOLCANO = "Mount Etna is an active volcano on the east coast of Sicily, in Italy."


def pdf_bytes(pages: list[str]) -> bytes:
    """A minimal PDF with one line of Helvetica text on each page (for the reader's tests)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = b"%PDF-1.4\n", []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Good files of every kind, and the bad ones a real folder holds."""
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "bees.txt").write_text(BEES, encoding="utf-8")
    (d / "sub" / "etna.md").write_text(f"# Etna\n\n{VOLCANO}\n", encoding="utf-8")
    (d / "page.html").write_text(
        "<html><head><script>var hidden = 'never indexed';</script></head><body>"
        "<h1>Glaciers</h1><p>Glaciers carve valleys over thousands of years.</p></body></html>",
        encoding="utf-8",
    )
    (d / "report.pdf").write_bytes(pdf_bytes(["Copper conducts heat well.", "Tin melts early."]))
    (d / "latin1.txt").write_bytes("Le café de Zürich ouvre à huit heures.".encode("latin-1"))
    (d / "corrupt.pdf").write_bytes(b"%PDF-1.4\n\x00\x13garbage that is no PDF at all")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (d / "empty.txt").write_bytes(b"")
    return d


def _count(texts):
    return [len(t.split()) for t in texts]


def test_each_kind_of_file_is_read_with_its_offsets_and_pages(folder: Path) -> None:
    (pdf,) = read_documents(folder / "report.pdf")
    assert "Copper conducts heat" in pdf.text and "Tin melts" in pdf.text
    assert pdf.page_at(pdf.text.index("Copper")) == 1 and pdf.page_at(pdf.text.index("Tin")) == 2
    (page,) = read_documents(folder / "page.html")
    assert "Glaciers carve valleys" in page.text and "never indexed" not in page.text
    (latin,) = read_documents(folder / "latin1.txt")
    assert "café de Zürich" in latin.text


def test_chunks_follow_sentences_fit_the_limit_and_overlap(folder: Path) -> None:
    text = " ".join(f"Sentence number {i} says something about bees." for i in range(40))
    doc = Document("d", "d.txt", "d", text)
    chunks = chunk_document(doc, _count, max_tokens=30)
    assert len(chunks) > 3
    for c in chunks:
        assert doc.text[c.start : c.end] == c.text and _count([c.text])[0] <= 30
        assert c.text.startswith("Sentence") and c.text.endswith(".")
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # the boundary sentence is in both
    assert chunks[-1].end == len(text)
    spans = sentence_spans("Dr. Who arrived. Then 3 more came!\n\nA new paragraph")
    assert len(spans) >= 3


def test_a_folder_with_bad_files_indexes_the_good_ones_and_names_the_bad(
    folder: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "index"
    assert main(["index", str(folder), "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "3 skipped" in captured.out
    for bad in ("corrupt.pdf", "binary.txt", "empty.txt"):
        assert f"warning: skipped {folder / bad}" in captured.err, bad
    assert f"note: {folder / 'latin1.txt'}: not UTF-8" in captured.err
    index = DocumentIndex.open(out)
    for query, where in [
        ("waggle dance of honey bees", "bees.txt"),
        ("active volcano in Sicily", "etna.md"),
        ("valleys carved by glaciers", "page.html"),
        ("which metal conducts heat", "report.pdf"),
        ("café Zürich", "latin1.txt"),
    ]:
        for retriever in ("bm25", "dense", "hybrid"):
            hits = index.search(query, k=1, retriever=retriever)
            assert hits and hits[0].source.endswith(where), (query, retriever, hits)
    hit = index.search("Tin melts", k=1, retriever="bm25")[0]
    assert hit.page == 2 and "Tin melts" in hit.text
    doc = read_documents(folder / "report.pdf")[0]
    assert doc.text[hit.start : hit.end] == hit.text  # offsets into the document's text


def test_reindexing_adds_changed_files_and_drops_deleted_ones(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "index"
    index = DocumentIndex(out, create=True)
    first = index.update([folder])
    assert first.added_files == 5 and first.chunks == len(index)
    again = index.update([folder])
    # the empty file is known as empty (unchanged); unreadable ones are tried and reported again
    assert again.added_files == 0 and again.unchanged_files == 6 and again.chunks == first.chunks
    assert len(again.read.skipped) == 2
    (folder / "bees.txt").write_text("Bumblebees sleep in flowers at night.", encoding="utf-8")
    (folder / "sub" / "etna.md").unlink()
    third = DocumentIndex(out).update([folder])
    assert third.added_files == 1 and third.removed_files == 1
    reopened = DocumentIndex.open(out)
    assert not [h for h in reopened.search("volcano Sicily", k=10, retriever="bm25")]
    assert reopened.search("where do bumblebees sleep", k=1)[0].source.endswith("bees.txt")
    assert not reopened.search("waggle dance", k=5, retriever="bm25")


def test_reciprocal_rank_fusion() -> None:
    fused = fuse([[(1, 9.0), (2, 5.0), (3, 1.0)], [(3, 0.9), (1, 0.8)]], k=60)
    assert [i for i, _ in fused] == [1, 3, 2]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_hybrid_combines_min_max_normalized_scores_by_the_bm25_weight() -> None:
    sparse, dense = [(1, 10.0), (2, 5.0), (3, 0.0)], [(3, 0.9), (1, 0.5)]
    even = combine(sparse, dense, 0.5)  # 1: (1 + 0) / 2, 2: 0.5 / 2, 3: (0 + 1) / 2
    assert [i for i, _ in even] == [1, 3, 2] and even[0][1] == pytest.approx(0.5)
    assert [i for i, _ in even] == [i for i, _ in combine(dense, sparse, 0.5)]
    assert [i for i, _ in combine(sparse, dense, 1.0)] == [1, 2, 3]  # BM25 alone
    assert [i for i, _ in combine(sparse, dense, 0.0)][0] == 3  # dense alone
    assert combine([], [], 0.5) == [] and combine([(4, 2.0)], [], 0.5) == [(4, 0.5)]


@pytest.mark.parametrize("weight", [0.5, None])  # the convex combination, and rrf
def test_a_deeper_fetch_extends_the_fused_ranking_and_never_reorders_its_head(weight) -> None:
    """Fused over each ranking's top 100 whatever the depth: normalized over 200-400 chunks
    (an evaluation fetching deeper for recall@100), the top 10 that search and ask use moved."""
    from structqa.documents.mixing import FUSION_POOL, pooled

    # BM25 scores fall steeply and the dense ones slowly: a deeper tail changes the min-max
    sparse = [(i, 100.0 - i * i / 100) for i in range(300)]
    dense = [((i * 7) % 300, 0.9 - i / 1000) for i in range(300)]
    shallow = pooled(sparse[:FUSION_POOL], dense[:FUSION_POOL], weight)
    deep = pooled(sparse, dense, weight)
    assert deep[: len(shallow)] == shallow
    assert len({i for i, _ in deep}) == len(deep) and {i for i, _ in deep} == set(range(300))
    if weight is not None:  # (what it guards against: normalized over all 300, the head moves)
        assert [i for i, _ in combine(sparse, dense, weight)][:10] != [i for i, _ in shallow][:10]


def test_ndcg_and_recall_follow_trec_eval(tmp_path: Path) -> None:
    relevant = {"a": 2, "b": 1, "z": 0}
    assert ndcg_at(["a", "b", "c"], relevant) == pytest.approx(1.0)
    worse = (1 / 1.0 + 2 / 1.5849625007211563) / (2 / 1.0 + 1 / 1.5849625007211563)
    assert ndcg_at(["b", "a"], relevant) == pytest.approx(worse)
    assert recall_at(["c", "a"], relevant, 1) == 0.0 and recall_at(["c", "a"], relevant, 2) == 0.5
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tb\t1\n", encoding="utf-8")
    assert read_qrels(qrels) == {"q1": {"a": 1}, "q2": {"b": 1}}
    scores = score_runs({"q1": ["a"], "q2": ["x", "b"], "q3": ["a"]}, read_qrels(qrels))
    assert scores["queries"] == 2 and scores["recall@1"] == 0.5 and scores["recall@5"] == 1.0


def test_evaluate_retrieval_on_a_beir_folder(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    records = [
        {"_id": "d1", "title": "Bees", "text": BEES},
        {"_id": "d2", "title": "Etna", "text": VOLCANO},
    ]
    corpus.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"_id": "q1", "text": "how do bees tell where flowers are"}\n'
        '{"_id": "q2", "text": "volcano in Italy"}\n',
        encoding="utf-8",
    )
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    index = tmp_path / "index"
    assert main(["index", str(corpus), "--out", str(index), "--no-progress"]) == 0
    capsys.readouterr()
    args = ["--queries", str(queries), "--qrels", str(qrels), "--out", str(tmp_path / "s.json")]
    assert main(["evaluate-retrieval", str(index), *args]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["ndcg@10"] == pytest.approx(1.0) and scores["recall@1"] == 1.0


def test_ask_reads_the_retrieved_chunks_and_answers_with_sources(
    folder: Path, tmp_path: Path, tiny_trained_run: Path, capsys
) -> None:
    """`structqa ask` with a (tiny) trained reader: answers come from retrieved chunks, with
    the document, page and offsets that locate them in the document's text."""
    from structqa.documents.ask import RANK_DECAY, ask
    from structqa.prediction import Predictor

    out = tmp_path / "index"
    assert main(["index", str(folder), "--out", str(out), "--no-progress"]) == 0
    index = DocumentIndex.open(out)
    reader = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")
    (result,) = ask(index, reader, ["Where is Mount Etna?"], top_k_chunks=3)
    assert len(result.hits) == 3 and not result.no_answer
    texts = {str(p): d.text for p in folder.rglob("*.*") for d in _readable(p)}
    for a in result.answers:
        assert texts[a.source][a.start : a.end] == a.text  # offsets into the document
        assert a.chunk_text[a.chunk_start : a.chunk_end] == a.text
    ranked = [a.rank_score for a in result.answers]
    assert ranked == sorted(ranked, reverse=True)
    for a in result.answers:  # the reader's probability, discounted by the chunk's rank
        decay = math.exp(-RANK_DECAY * a.retrieval_rank)
        assert a.rank_score == pytest.approx(a.probability * decay)
    capsys.readouterr()
    args = ["ask", str(out), "--question", "Where is Mount Etna?", "--json", "--top-k-chunks", "3"]
    assert main([*args, "--checkpoint", str(tiny_trained_run / "best"), "--bf16", "off"]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["answers"][0]["text"] == result.answers[0].text
    assert main(["ask", str(out), "--question", "Where?"]) == 2  # no reader named
    err = capsys.readouterr().err
    assert "structqa reader build" in err and "give --checkpoint CKPT" in err
    # --whole-words as serve and predict take it: the same answers as the API widened
    widened = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off", whole_words=True)
    (wide,) = ask(index, widened, ["Where is Mount Etna?"], top_k_chunks=3)
    ckpt = ["--checkpoint", str(tiny_trained_run / "best"), "--bf16", "off", "--whole-words"]
    assert main([*args, *ckpt]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert [a["text"] for a in reply["answers"]] == [a.text for a in wide.answers[:5]]


def test_the_collection_commands_take_whole_words_as_serve_does() -> None:
    from structqa.cli import build_parser

    parser = build_parser()
    for command in (
        ["ask", "IDX", "--question", "Q"],
        ["evaluate-ask", "IDX", "--eval", "F"],
        ["fit-no-answer", "IDX", "--questions", "F"],
    ):
        assert parser.parse_args(command).whole_words is None  # the checkpoint's setting
        assert parser.parse_args([*command, "--whole-words"]).whole_words is True
        assert parser.parse_args([*command, "--no-whole-words"]).whole_words is False


def test_identical_answers_from_overlapping_chunks_are_merged() -> None:
    from structqa.documents.ask import SourcedAnswer, merged

    def answer(chunk: int, p: float, start: int = 10, file: str = "f") -> SourcedAnswer:
        where = ("d", "t", file, None, start, start + 4, chunk, 0, 4, "x")
        return SourcedAnswer("Etna", p, 1.0, *where, rank_score=p)

    out = merged([answer(1, 0.4), answer(2, 0.7), answer(3, 0.5, start=90)])
    assert [(a.chunk_id, a.chunks, a.probability) for a in out] == [(2, 2, 0.7), (3, 1, 0.5)]
    # the same corpus id in two files names two documents: both answers stay
    out = merged([answer(1, 0.4), answer(2, 0.7, file="other.jsonl")])
    assert [(a.source, a.chunks) for a in out] == [("other.jsonl", 1), ("f", 1)]


def _readable(path: Path) -> list:
    try:
        return read_documents(path)
    except Exception:  # noqa: BLE001 (the bad files of the fixture)
        return []


def test_the_qdrant_store_ranks_as_the_embedded_faiss_one(folder: Path, tmp_path: Path) -> None:
    """The same index through Qdrant's client (embedded here; a cluster speaks the same API):
    the same chunks, the same rankings, updates included."""
    built = {}
    for store in ("faiss", "qdrant"):
        index = DocumentIndex(tmp_path / store, store=store, create=True)
        index.update([folder])
        built[store] = index
    assert len(built["qdrant"].dense) == len(built["faiss"].dense) == len(built["faiss"])
    for query in ("honey bee dance", "volcano", "heat conduction of metals", "café"):
        for retriever in ("dense", "hybrid"):
            ranked = {
                store: [(h.source, h.start) for h in index.search(query, 5, retriever)]
                for store, index in built.items()
            }
            assert ranked["qdrant"] == ranked["faiss"], (query, retriever)
    (folder / "bees.txt").unlink()
    built["qdrant"].update([folder])
    assert len(built["qdrant"].dense) == len(built["qdrant"])
    for index in built.values():
        index.close()
    with DocumentIndex.open(tmp_path / "qdrant") as reopened:
        assert reopened.store_spec == "qdrant"
        hits = reopened.search("waggle dance", 10)
        assert hits and not any(h.source.endswith("bees.txt") for h in hits)
    with pytest.raises(ValueError, match="its vectors are in 'qdrant'"):
        DocumentIndex(tmp_path / "qdrant", store="faiss")


def test_a_squad_file_asked_of_an_index_of_its_passages(
    shared_data: Path, tmp_path: Path, tiny_trained_run: Path, capsys, caplog
) -> None:
    """SQuAD-open in small: the fixture's passages indexed, each question asked of the whole
    index; its gold passage is found, and the end-to-end answers are scored beside the
    reader's answers on the gold passage."""
    mini = shared_data / "fixtures/squad-v1.1-mini.json"
    index = tmp_path / "index"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    capsys.readouterr()
    reader = ["--checkpoint", str(tiny_trained_run / "best"), "--bf16", "off", "--no-progress"]
    caplog.set_level("INFO", logger="structqa.training")
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *reader]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["questions"] == 5
    # --no-progress: log lines for a log file, not silence
    assert any(r.getMessage().startswith("asking: 5/5 questions (100.0%)") for r in caplog.records)
    assert scores["hybrid recall@10"] == scores["bm25 recall@10"] == 1.0
    assert 0.0 <= scores["open_f1"] <= 100.0 and 0.0 <= scores["gold_passage_f1"] <= 100.0
    # the gold-passage answers saved by `evaluate` stand in for reading the passages again
    saved = tmp_path / "gold-answers"
    ckpt = str(tiny_trained_run / "best")
    evaluate = ["evaluate", ckpt, "--eval", str(mini), "--out", str(saved), "--bf16", "off"]
    assert main([*evaluate, "--runtime", "torch"]) == 0
    capsys.readouterr()
    gold = ["--gold-answers", str(saved / "predictions.json")]
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *reader, *gold]) == 0
    reused = json.loads(capsys.readouterr().out)
    assert reused["gold_passage_f1"] == pytest.approx(scores["gold_passage_f1"])
    assert reused["open_f1"] == pytest.approx(scores["open_f1"])
    answers = json.loads((saved / "predictions.json").read_text())
    (tmp_path / "partial.json").write_text(json.dumps(dict(list(answers.items())[:2])))
    partial = ["--gold-answers", str(tmp_path / "partial.json")]
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *reader, *partial]) == 2
    assert "has no saved gold-passage answer" in capsys.readouterr().err
    only = ["--retrieval-only", "--no-progress"]
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *only]) == 0
    recall = json.loads(capsys.readouterr().out)
    assert recall["hybrid recall@10"] == 1.0 and "open_f1" not in recall
    sample = [*only, "--sample", "3", "--sample-seed", "1"]
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *sample]) == 0
    drawn = json.loads(capsys.readouterr().out)
    assert drawn["questions"] == 3 and drawn["sample"] == {"questions": 3, "seed": 1}


def test_fit_fusion_saves_the_weight_that_hybrid_search_uses(
    shared_data: Path, tmp_path: Path, capsys
) -> None:
    mini = shared_data / "fixtures/squad-v1.1-mini.json"
    index = tmp_path / "index"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    assert DocumentIndex.open(index).bm25_weight == 0.5  # the default, nothing fitted
    capsys.readouterr()
    assert main(["fit-fusion", str(index), "--questions", str(mini), "--test", str(mini)]) == 0
    out = json.loads(capsys.readouterr().out)
    recall = out["fit"]["recall_at_5"]
    assert len(recall) == 21 and out["fit"]["questions"] == 5
    best = max(recall.values())
    # the best weight, and among equals the one nearest the default
    tied = [float(w) for w, r in recall.items() if r == best]
    assert out["fit"]["bm25_weight"] == min(tied, key=lambda w: abs(w - 0.5))
    assert DocumentIndex.open(index).bm25_weight == out["fit"]["bm25_weight"]
    assert {"bm25 recall@5", "dense recall@5", "hybrid recall@5", "rrf recall@5"} <= set(
        out["test"]
    )


def test_evaluate_ask_recall_counts_documents_whatever_the_chunks_read(
    shared_data: Path, tmp_path: Path
) -> None:
    """A long document whose chunks all match the questions filled the first ten chunks:
    recall@10 counted chunks, so it moved with --top-k-chunks and missed a gold passage that
    was the second document."""
    from structqa.documents.evaluate import evaluate_open

    mini = shared_data / "fixtures/squad-v1.1-mini.json"
    (tmp_path / "docs").mkdir()
    mini_copy = tmp_path / "docs" / "mini.json"
    mini_copy.write_bytes(mini.read_bytes())
    words = "Notre Dame Main Building Virgin Mary Lourdes France Zahm models neoprene brother"
    long = " ".join(f"{words} appear in note {i} of the archive." for i in range(400))
    (tmp_path / "docs" / "archive.txt").write_text(long, encoding="utf-8")
    examples = list(read_extractive(mini_copy).examples)
    with DocumentIndex(tmp_path / "index", create=True) as index:
        index.update([tmp_path / "docs"])
        chunks = index.search_many([ex.question for ex in examples], 10, "bm25")
        assert any(all(h.source.endswith("archive.txt") for h in hits) for hits in chunks)
        recall = {
            k: evaluate_open(index, None, examples, k, read=False).recall for k in (1, 10, 30)
        }
    assert recall[1] == recall[10] == recall[30]
    assert recall[1]["bm25"][5] == recall[1]["bm25"][10] == 1.0  # 3 documents in all


def test_a_long_question_in_the_file_is_cut_not_fatal(
    shared_data: Path, tmp_path: Path, tiny_trained_run: Path, capsys, caplog
) -> None:
    """One question over data.max_query_len tokens stopped evaluate-ask (and fit-no-answer)
    with "pair N: the question is too long", N a question x chunk pair."""
    doc = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text())
    qa = doc["data"][0]["paragraphs"][0]["qas"][0]
    qa["question"] = "Notre Dame " * 60 + qa["question"]
    mini = tmp_path / "long.json"
    mini.write_text(json.dumps(doc), encoding="utf-8")
    index = tmp_path / "index"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    capsys.readouterr()
    reader = ["--checkpoint", str(tiny_trained_run / "best"), "--bf16", "off", "--no-progress"]
    assert main(["evaluate-ask", str(index), "--eval", str(mini), *reader]) == 0
    assert json.loads(capsys.readouterr().out)["questions"] == 5
    assert "longer than data.max_query_len" in caplog.text and repr(qa["id"]) in caplog.text


@pytest.mark.parametrize("option", ["--max-questions", "--sample"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_count_of_questions_below_one_is_refused(option: str, value: str, capsys) -> None:
    """--max-questions -5 sliced the last five questions off, and --sample 0 printed zeros."""
    with pytest.raises(SystemExit) as stop:
        main(["evaluate-ask", "index", "--eval", "file.json", option, value])
    assert stop.value.code == 2
    assert f"{option}: {value}: give 1 or more" in capsys.readouterr().err
