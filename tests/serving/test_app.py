"""The HTTP service answers over loopback exactly as the Predictor does."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from structqa.serving.app import make_server
from structqa.serving.predictor import Predictor


@pytest.fixture(scope="module")
def served(tiny_trained_run):
    predictor = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")
    server = make_server(predictor, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield predictor, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _post(url: str, payload: object) -> tuple[int, object]:
    req = urllib.request.Request(
        url, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_health_and_single_and_batch(served):
    predictor, url = served
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        assert json.loads(resp.read()) == {"status": "ok"}
    q, c = "Who won?", "The Denver Broncos won the game against the Panthers."
    status, body = _post(url + "/predict", {"question": q, "context": c})
    assert status == 200
    expected = predictor.predict(q, c)
    assert body["answer"] == expected.text and body["start"] == expected.start
    # a probability, the answer's share of the n-best (score is an unbounded logit sum)
    assert 0.0 < body["probability"] <= 1.0
    assert body["probability"] == pytest.approx(body["nbest"][0]["probability"])
    status, body = _post(url + "/predict", {"pairs": [{"question": q, "context": c}] * 2})
    assert status == 200 and [b["answer"] for b in body] == [expected.text] * 2


def test_bad_requests_are_400(served):
    _, url = served
    assert _post(url + "/predict", {"question": "only"})[0] == 400
    status, body = _post(url + "/predict", {"question": "", "context": "x"})
    assert status == 400 and "non-empty" in body["error"]
    assert _post(url + "/nowhere", {})[0] == 404


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"question": None, "context": "The Broncos won."}, "'question' must be a string"),
        ({"question": 123, "context": "The Broncos won."}, "'question' must be a string"),
        ({"question": "Who?", "context": ["a", "b"]}, "'context' must be a string"),
        ({"pairs": [{"question": "Who?", "context": 5}]}, "pairs[0]: 'context' must be"),
        ({"pairs": {"question": "Who?"}}, "'pairs' must be a list"),
        ({"pairs": ["Who?"]}, "pairs[0] is not an object"),
        (["Who?", "ctx"], "the body is a JSON list"),
    ],
)
def test_wrong_types_are_400_not_answered(served, payload, needle):
    _, url = served
    status, body = _post(url + "/predict", payload)
    assert status == 400 and needle in body["error"]


def _raw(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    """A POST with exactly these bytes and headers (urllib would fix Content-Length)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("POST", "/predict")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("body", "length", "needle"),
    [
        ('{"question":"\xff\xfe","context":"abc"}'.encode("latin-1"), None, "not UTF-8"),
        (b'{"question": "Who?", "context": "x"}', "abc", "Content-Length"),
        (b'{"question": "Who?", "context": "x"}', "-5", "Content-Length"),
        (b"{not json", None, "not JSON"),
    ],
)
def test_malformed_http_gets_a_400_reply(served, body, length, needle):
    _, url = served
    status, reply = _raw(url, body, {"Content-Length": length or str(len(body))})
    assert status == 400 and needle in reply["error"]
