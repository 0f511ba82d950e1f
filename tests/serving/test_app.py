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
    status, body = _post(url + "/predict", {"pairs": [{"question": q, "context": c}] * 2})
    assert status == 200 and [b["answer"] for b in body] == [expected.text] * 2


def test_bad_requests_are_400(served):
    _, url = served
    assert _post(url + "/predict", {"question": "only"})[0] == 400
    status, body = _post(url + "/predict", {"question": "", "context": "x"})
    assert status == 400 and "non-empty" in body["error"]
    assert _post(url + "/nowhere", {})[0] == 404
