"""What a client cannot do to the service: make it answer 500 with a number too long for
Python, grow its metrics without bound with made-up methods, or be misled by an explain limit
named after the wrong setting; a model that failed its warm-up is dead to a liveness probe;
/ready does not wait on an index busy with a search."""

from __future__ import annotations

import threading
from pathlib import Path

from serving_support import CONTEXT, QUESTION, client_for

from structqa.cli import main
from structqa.prediction.predictor import Predictor
from structqa.serving.app import EXPLAIN_MAX_CHARS, create_app
from structqa.serving.documents import DocumentService
from structqa.serving.settings import ServeSettings


def test_a_number_too_long_for_python_is_a_400_not_a_500(tiny_predictor: Predictor) -> None:
    body = '{"question": "Who won?", "context": "The Broncos won.", "top_k": 1' + "0" * 5000
    body += "}"
    with client_for(tiny_predictor) as client:
        for path in ("/v1/answer", "/predict"):
            reply = client.post(path, content=body, headers={"Content-Type": "application/json"})
            assert reply.status_code == 400, (path, reply.text)
            assert "cannot be read" in reply.json()["error"]


def test_made_up_methods_do_not_grow_the_metrics(tiny_predictor: Predictor) -> None:
    with client_for(tiny_predictor) as client:
        before = len(client.get("/metrics").text)
        for i in range(200):
            client.request(f"M{i:05d}", "/health")
        text = client.get("/metrics").text
    assert "M00001" not in text and 'method="other"' in text
    assert len(text) < before + 5_000


def test_explains_limit_is_named_as_its_own(tiny_predictor: Predictor) -> None:
    context = "The Broncos won. " * (EXPLAIN_MAX_CHARS // 17 + 10)
    with client_for(tiny_predictor, max_context_chars=100_000) as client:
        reply = client.post("/v1/explain", json={"question": QUESTION, "context": context})
    assert reply.status_code == 413
    message = reply.json()["error"]
    assert "explain's own limit" in message and "--max-context-chars" not in message


def test_a_model_that_failed_its_warm_up_is_not_alive(tiny_predictor: Predictor) -> None:
    from fastapi.testclient import TestClient

    app = create_app(tiny_predictor, ServeSettings())
    with TestClient(app, raise_server_exceptions=False) as client:
        service = app.state.service
        service.wait_ready(60)
        service.status = "failed"  # as _warm_up leaves it when its answer raised
        health = client.get("/health")
        assert health.status_code == 503 and health.json() == {"status": "failed"}
        reply = client.post("/v1/answer", json={"question": QUESTION, "context": CONTEXT})
        assert reply.status_code == 503 and "Retry-After" not in reply.headers
        assert "see the server's log" in reply.json()["error"]


def test_ready_does_not_wait_on_a_busy_index(
    tiny_predictor: Predictor, shared_data: Path, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient

    index = tmp_path / "index"
    mini = shared_data / "fixtures" / "squad-v1.1-mini.json"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    docs = DocumentService(index)
    app = create_app(tiny_predictor, ServeSettings(), 0.0, docs)
    release, held = threading.Event(), threading.Event()

    def busy() -> None:  # a long search or reopen holds the index's thread
        release.wait(60)
        held.set()

    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.service.wait_ready(60)
        docs._thread.submit(busy)
        ready = client.get("/ready")
        answered_while_busy = not held.is_set()
        release.set()
        chunks = docs._thread.submit(lambda: len(docs.index)).result()
    assert answered_while_busy  # (waiting on the thread, it would answer after busy())
    assert ready.status_code == 200 and ready.json()["index"]["chunks"] == chunks > 0


def test_text_without_a_character_a_model_reads_is_refused_everywhere(
    tiny_predictor: Predictor,
) -> None:
    import pytest

    from structqa.prediction import InvalidText

    unread = ["\u200b\u200b", "\x07", "\ufeff", "\u0301\u0301", "\ufffd"]
    with client_for(tiny_predictor) as client:
        for text in unread:
            for field, body in (
                ("context", {"question": QUESTION, "context": text}),
                ("question", {"question": text, "context": CONTEXT}),
            ):
                reply = client.post("/v1/answer", json=body)
                assert reply.status_code == 422, (text, reply.text)
                (where,) = reply.json()["fields"]
                assert where["field"] == field and "no character a model reads" in where["message"]
    for text in unread:  # the Python API and the CLI's predict: the same rule
        with pytest.raises(InvalidText, match="the question has no character a model reads"):
            tiny_predictor.predict(text, CONTEXT)
    assert tiny_predictor.predict("Who won\u200b?", CONTEXT).text is not None  # (readable too)
