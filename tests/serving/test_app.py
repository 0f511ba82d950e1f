"""The HTTP API answers exactly as the Predictor does, in the documented shapes."""

from __future__ import annotations

import gc

import pytest
from serving_support import CONTEXT, QUESTION, client_for

from structqa.prediction.predictor import Predictor


@pytest.fixture(scope="module")
def client(tiny_predictor: Predictor):
    with client_for(tiny_predictor) as c:
        yield c


def test_answer_matches_the_predictor(client, tiny_predictor):
    r = client.post("/v1/answer", json={"question": QUESTION, "context": CONTEXT, "top_k": 3})
    assert r.status_code == 200
    body = r.json()
    expected = tiny_predictor.predict(QUESTION, CONTEXT)
    assert body["answer"] == expected.text
    assert (body["start"], body["end"]) == (expected.start, expected.end)
    assert CONTEXT[body["start"] : body["end"]] == body["answer"]
    assert body["probability"] == pytest.approx(expected.probability)
    assert body["no_answer"] is expected.no_answer
    assert [c["text"] for c in body["nbest"]] == [c.text for c in expected.nbest[:3]]
    assert body["model"]["head"] == "independent"


def test_a_list_is_answered_in_order(client, tiny_predictor):
    other = "The Panthers lost to the Broncos in Santa Clara, California, in February."
    pairs = [(QUESTION, CONTEXT), ("Where was the game?", other), (QUESTION, CONTEXT)]
    r = client.post("/v1/answer", json=[{"question": q, "context": c} for q, c in pairs])
    assert r.status_code == 200
    expected = tiny_predictor.predict_batch(pairs)
    assert [b["answer"] for b in r.json()] == [a.text for a in expected]
    assert all(len(b["nbest"]) <= 5 for b in r.json())  # the default top_k


def test_predict_alias_keeps_the_old_shapes(client, tiny_predictor):
    expected = tiny_predictor.predict(QUESTION, CONTEXT)
    r = client.post("/predict", json={"question": QUESTION, "context": CONTEXT})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"answer", "start", "end", "score", "probability", "no_answer", "nbest"}
    assert body["answer"] == expected.text and body["start"] == expected.start
    assert body["probability"] == pytest.approx(expected.probability)  # the Predictor's own
    r = client.post("/predict", json={"pairs": [{"question": QUESTION, "context": CONTEXT}] * 2})
    assert r.status_code == 200 and [b["answer"] for b in r.json()] == [expected.text] * 2
    # top_k, which the body takes as /v1/answer's does, cuts the n-best here too
    r = client.post("/predict", json={"question": QUESTION, "context": CONTEXT, "top_k": 1})
    assert r.status_code == 200 and len(r.json()["nbest"]) == 1


def test_health_ready_metrics(client):
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["api_key_required"] is False
    # the limits the page splits a list of questions by
    assert ready.json()["max_questions"] == 32 and ready.json()["max_body_bytes"] == 4 * 1024**2
    assert gc.get_freeze_count() > 0  # the warm-up froze the long-lived objects
    client.post("/v1/answer", json={"question": QUESTION, "context": CONTEXT})
    text = client.get("/metrics").text
    assert 'structqa_http_requests_total{method="POST",route="/v1/answer",status="200"}' in text
    for name in (
        "structqa_http_request_seconds_bucket",
        "structqa_batch_windows_bucket",
        "structqa_queue_requests",
        "structqa_model_load_seconds",
    ):
        assert name in text


def test_docs_and_page_are_served_offline(client):
    docs = client.get("/docs").text
    assert "/docs-assets/swagger-ui-bundle.js" in docs and "http" not in docs.split("<body>")[1]
    assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
    assert client.get("/docs-assets/swagger-ui.css").status_code == 200
    schema = client.get("/openapi.json").json()
    assert "/v1/answer" in schema["paths"] and "AnswerRequest" in schema["components"]["schemas"]
    page = client.get("/")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/app.js", "/static/style.css"):
        r = client.get(asset)
        assert r.status_code == 200 and "http://" not in r.text and "https://" not in r.text


def test_metrics_of_two_apps_do_not_collide(tiny_predictor):
    with client_for(tiny_predictor) as a, client_for(tiny_predictor) as b:
        a.get("/health")
        assert 'route="/health"' in a.get("/metrics").text
        assert 'route="/health"' not in b.get("/metrics").text
