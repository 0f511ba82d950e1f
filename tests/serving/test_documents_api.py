"""POST /v1/search and POST /v1/ask of a server started with an index: the same hits as the
index's own search, the same ranked answers as `structqa ask` (one answer path), the limits
and errors of the other routes, and no such routes without an index."""

from __future__ import annotations

from pathlib import Path

import pytest
from serving_support import client_for

from structqa.cli import main
from structqa.documents import DocumentIndex
from structqa.documents.ask import ask
from structqa.serving.app import create_app
from structqa.serving.documents import DocumentService
from structqa.serving.schemas import MAX_QUERY_CHARS
from structqa.serving.settings import ServeSettings

QUESTIONS = [
    "What sits on top of the Main Building at Notre Dame?",
    "What did the brother of John Zahm construct at Notre Dame?",
]


@pytest.fixture(scope="module")
def squad_index(shared_data: Path, tmp_path_factory) -> Path:
    """An index of the mini SQuAD fixture's passages (each one a document)."""
    out = tmp_path_factory.mktemp("squad-index") / "index"
    mini = shared_data / "fixtures" / "squad-v1.1-mini.json"
    assert main(["index", str(mini), "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def client(tiny_predictor, squad_index: Path):
    from fastapi.testclient import TestClient

    app = create_app(tiny_predictor, ServeSettings(queue_size=4), 0.0, DocumentService(squad_index))
    with TestClient(app, raise_server_exceptions=False) as c:
        assert app.state.service.wait_ready(60)
        yield c


def test_search_returns_the_indexs_hits(client, squad_index: Path):
    reply = client.post("/v1/search", json={"query": QUESTIONS[0], "top_k": 2})
    assert reply.status_code == 200, reply.text
    with DocumentIndex.open(squad_index) as index:
        expected = index.search(QUESTIONS[0], 2, "hybrid")
    hits = reply.json()["hits"]
    assert [h["chunk_id"] for h in hits] == [h.chunk_id for h in expected]
    assert hits[0]["text"] == expected[0].text and hits[0]["source"].endswith(".json")
    bm25 = client.post("/v1/search", json={"query": QUESTIONS[0], "retriever": "bm25"})
    assert bm25.status_code == 200 and bm25.json()["hits"], bm25.json()


def test_ask_gives_what_structqa_ask_gives(client, tiny_predictor, squad_index: Path):
    with DocumentIndex.open(squad_index) as index:
        expected = ask(index, tiny_predictor, QUESTIONS, top_k_chunks=3)
    for question, want in zip(QUESTIONS, expected, strict=True):
        reply = client.post("/v1/ask", json={"question": question, "top_k_chunks": 3})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["no_answer"] == want.no_answer
        got = [(a["text"], a["doc_id"], a["start"], a["end"]) for a in body["answers"]]
        assert got == [(a.text, a.doc_id, a.start, a.end) for a in want.answers[:5]]
        for a, w in zip(body["answers"], want.answers, strict=False):
            assert a["probability"] == pytest.approx(w.probability, abs=1e-5)
            assert a["chunk_text"][a["chunk_start"] : a["chunk_end"]] == a["text"]
        assert body["model"]["head"] and "calibrated" in body


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/ask", {"question": "  "}, "question"),
        ("/v1/ask", {"question": "Who?", "top_k_chunks": 0}, "top_k_chunks"),
        ("/v1/ask", {"question": "Who?", "retriever": "magic"}, "retriever"),
        ("/v1/search", {"query": "x", "top_k": 1000}, "top_k"),
        ("/v1/search", {"query": "x", "extra": 1}, "extra"),
    ],
)
def test_bad_requests_name_the_field(client, path, body, field):
    reply = client.post(path, json=body)
    assert reply.status_code == 422
    assert field in reply.json()["error"]


def _searches(client) -> float:
    """How many searches of the index the server has made (its search-time histogram's count)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("structqa_search_seconds_count"):
            return float(line.split()[1])
    raise AssertionError("no structqa_search_seconds_count in /metrics")


def test_an_over_long_question_is_a_422_naming_it_before_any_search(client):
    """A question longer than the reader reads was searched for first, then refused."""
    before = _searches(client)
    client.post("/v1/search", json={"query": QUESTIONS[0], "top_k": 1})
    assert _searches(client) == before + 1  # (each search is counted)
    question = "why " * 400  # under the characters a body takes, over the tokens read
    reply = client.post("/v1/ask", json={"question": question})
    assert reply.status_code == 422, reply.text
    assert reply.json()["fields"][0]["field"] == "question"
    assert _searches(client) == before + 1  # refused without searching the index
    # the refusal /v1/answer gives the same question
    answer = client.post("/v1/answer", json={"question": question, "context": "Bees dance."})
    assert answer.status_code == 422 and reply.json()["error"] == answer.json()["error"]


@pytest.mark.parametrize(("path", "field"), [("/v1/search", "query"), ("/v1/ask", "question")])
def test_a_query_over_the_character_limit_is_a_422_naming_it(client, path, field):
    """A search query had no length limit: the index searched for all of a 4 MB body."""
    before = _searches(client)
    reply = client.post(path, json={field: "bee " * (MAX_QUERY_CHARS // 4) + "s"})
    assert reply.status_code == 422, reply.text
    body = reply.json()
    assert body["fields"] == [{"field": field, "message": body["fields"][0]["message"]}]
    assert f"the {MAX_QUERY_CHARS:,} characters" in body["error"] and "shorten" in body["error"]
    assert _searches(client) == before
    at_limit = client.post("/v1/search", json={"query": "bee " * (MAX_QUERY_CHARS // 4)})
    assert at_limit.status_code == 200, at_limit.text


def test_ready_names_the_index_and_the_page_offers_documents(client):
    ready = client.get("/ready").json()
    assert ready["index"]["chunks"] > 0 and ready["index"]["no_answer"] == "per passage"
    assert 'id="mode-documents"' in client.get("/").text


def test_without_an_index_there_is_no_ask(tiny_predictor):
    with client_for(tiny_predictor) as c:
        reply = c.post("/v1/ask", json={"question": "Who?"})
        assert reply.status_code == 404 and "--index" in reply.json()["error"]
        assert c.get("/ready").json()["index"] is None


@pytest.mark.parametrize("threshold", [0.0, 1e9])
def test_the_indexs_set_level_fit_decides(
    tiny_predictor, tiny_trained_run, squad_index, tmp_path, threshold
):
    import shutil

    from fastapi.testclient import TestClient

    from structqa.documents.no_answer import SetThreshold, reader_id, save

    index = tmp_path / "index"
    shutil.copytree(squad_index, index)
    reader = tiny_trained_run / "best"
    fitted = SetThreshold(threshold, reader_id(reader), "hybrid", 3, "test", 2, 1, 50.0, 40.0)
    save(index, fitted)
    app = create_app(tiny_predictor, ServeSettings(), 0.0, DocumentService(index, reader))
    with TestClient(app, raise_server_exceptions=False) as c:
        assert app.state.service.wait_ready(60)
        assert c.get("/ready").json()["index"]["no_answer"].startswith("set-level")
        with DocumentIndex.open(index) as ix:
            (want,) = ask(ix, tiny_predictor, QUESTIONS[:1], 3, set_threshold=threshold)
        body = c.post("/v1/ask", json={"question": QUESTIONS[0], "top_k_chunks": 3}).json()
        assert body["no_answer"] == want.no_answer == (threshold > 1)
        assert [a["text"] for a in body["answers"]] == [a.text for a in want.answers[:5]]


def test_fits_are_matched_to_the_reader_as_the_server_loaded_it(
    tiny_trained_run, squad_index, tmp_path
):
    """A calibration rewritten on disk while the server runs changes the reader's manifest,
    not the answers the server gives: a fit made for the reader it serves still applies when
    the index is reopened, and one made for the rewritten reader does not."""
    import shutil

    from structqa.documents.no_answer import SetThreshold, reader_id, save

    index, reader = tmp_path / "index", tmp_path / "reader"
    shutil.copytree(squad_index, index)
    shutil.copytree(tiny_trained_run / "best", reader)
    served = reader_id(reader)
    save(index, SetThreshold(1.0, served, "hybrid", 3, "test", 2, 1, 50.0, 40.0))
    docs = DocumentService(index, reader)
    try:
        assert docs.fitted is not None
        manifest = reader / "manifest.json"
        manifest.write_text(manifest.read_text() + "\n")  # as `structqa calibrate` reseals it
        assert reader_id(reader) != served
        assert docs._fit() is not None and docs._fit().reader == served
        save(index, SetThreshold(1.0, reader_id(reader), "hybrid", 3, "test", 2, 1, 50.0, 40.0))
        assert docs._fit() is None  # fitted for answers this server does not give
    finally:
        docs.close()


def test_a_running_server_follows_the_index_on_disk(
    tiny_predictor, shared_data: Path, tmp_path: Path
) -> None:
    """`structqa index` run again while the server runs once changed nothing it served:
    searches kept the old chunks while /ready counted the new ones. The service now reopens
    the index when an update has finished (and every retriever the CLI takes is served)."""
    from fastapi.testclient import TestClient

    from structqa.documents.index import RETRIEVERS

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ferry.txt").write_text("The harbour ferry leaves at seven every morning.\n")
    out = tmp_path / "index"
    assert main(["index", str(folder), "--out", str(out), "--no-progress"]) == 0
    docs = DocumentService(out, reader=tmp_path / "reader")  # (no fit for it yet)
    app = create_app(tiny_predictor, ServeSettings(queue_size=4), 0.0, docs)
    query = {"query": "observatory telescope mirror", "retriever": "bm25"}
    with TestClient(app, raise_server_exceptions=False) as c:
        assert app.state.service.wait_ready(60)
        assert c.post("/v1/search", json=query).json()["hits"] == []
        (folder / "observatory.txt").write_text("The observatory telescope has a 2 m mirror.\n")
        assert main(["index", str(folder), "--out", str(out), "--no-progress"]) == 0
        hits = c.post("/v1/search", json=query).json()["hits"]
        assert [Path(h["source"]).name for h in hits] == ["observatory.txt"]
        assert c.get("/ready").json()["index"]["chunks"] == 2
        (folder / "ferry.txt").unlink()
        assert main(["index", str(folder), "--out", str(out), "--no-progress"]) == 0
        ferry = c.post("/v1/search", json={"query": "harbour ferry", "retriever": "bm25"})
        assert ferry.json()["hits"] == []
        for retriever in RETRIEVERS:
            reply = c.post("/v1/search", json={"query": "telescope", "retriever": retriever})
            assert reply.status_code == 200 and reply.json()["hits"], (retriever, reply.text)
        # a fit file that cannot be read: the reopened index serves, without the fit
        (out / "no_answer.json").write_text("{not json")
        after = c.post("/v1/search", json={"query": "telescope", "retriever": "bm25"})
        assert after.status_code == 200 and after.json()["hits"]
        assert docs.fitted is None


@pytest.mark.parametrize("path", ["/v1/search", "/v1/ask"])
@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"question":', "the body is not valid JSON: Expecting value at line 1 column 13"),
        (b"", "the body is empty"),
        (b'{"query": "caf\xe9"}', "the body is not UTF-8: byte 0xe9 at offset 14"),
    ],
)
def test_a_body_that_is_not_json_is_a_400_saying_why(client, path, body, said):
    """As POST /v1/answer says it (these routes' bodies are parsed by FastAPI, which said
    '[12]: JSON decode error' with a 422, or 'There was an error parsing the body')."""
    reply = client.post(path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert said in reply.json()["error"]


def test_a_search_stuck_on_the_index_times_out_and_frees_its_place(tiny_predictor, squad_index):
    """A search waited on the index's thread without a deadline: clients that gave up kept
    their places, until every /v1/answer got 503."""
    import threading

    from fastapi.testclient import TestClient

    docs = DocumentService(squad_index)
    settings = ServeSettings(queue_size=1, request_timeout=0.3)
    app = create_app(tiny_predictor, settings, 0.0, docs)
    with TestClient(app, raise_server_exceptions=False) as c:
        assert app.state.service.wait_ready(60)
        release = threading.Event()
        docs._thread.submit(lambda: release.wait(30))  # the index busy (a reopen, say)
        try:
            for path, body in (
                ("/v1/search", {"query": "Notre Dame"}),
                ("/v1/ask", {"question": "Who founded Notre Dame?"}),
            ):
                r = c.post(path, json=body)
                assert r.status_code == 504, r.text
            answer = c.post("/v1/answer", json={"question": "Who?", "context": "Bees dance."})
            assert answer.status_code == 200, answer.text  # its one place was given back
        finally:
            release.set()
