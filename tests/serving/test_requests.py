"""Every malformed or refused request gets the right 4xx (or 503/504) with a clear message, as
JSON, and never a traceback or a path of the server."""

from __future__ import annotations

import json
import threading
import time

import pytest
from serving_support import CONTEXT, QUESTION, client_for

from structqa.prediction.predictor import Predictor

LIMITS = dict(max_context_chars=200, max_questions=3, max_body_bytes=250_000, api_key="s3cret")
KEY = {"X-API-Key": "s3cret", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def client(tiny_predictor: Predictor):
    with client_for(tiny_predictor, **LIMITS) as c:
        yield c


def _error(r, status: int, *needles: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["status"] == status
    for needle in needles:
        assert needle in body["error"], body["error"]
    assert "Traceback" not in r.text and "/structqa/" not in r.text
    return body


def _ok(q: str = QUESTION, c: str = CONTEXT) -> dict:
    return {"question": q, "context": c}


@pytest.mark.parametrize(
    ("body", "status", "needles"),
    [
        (b"{not json", 400, ["not valid JSON", "line 1 column 2"]),
        (b"", 400, ["body is empty"]),
        ('{"question":"\xff\xfe","context":"abc"}'.encode("latin-1"), 400, ["not UTF-8"]),
        (b"[" * 100_000 + b"]" * 100_000, 400, ["nested too deeply"]),
        (b'{"question": "\\ud800", "context": "abc"}', 422, ["question:", "lone surrogate"]),
        (b'{"question": "Who?", "context": "a\\udfffb"}', 422, ["context:", "U+DFFF"]),
        (b'{"question": "Who\\u0000?", "context": "abc"}', 422, ["question:", "NUL"]),
    ],
    ids=["invalid-json", "empty", "not-utf8", "deep-json", "surrogate", "low-surrogate", "nul"],
)
def test_bodies_the_model_cannot_read(client, body, status, needles):
    _error(client.post("/v1/answer", content=body, headers=KEY), status, *needles)


@pytest.mark.parametrize(
    ("payload", "needles"),
    [
        ({"question": None, "context": CONTEXT}, ["question: Input should be a valid string"]),
        ({"question": 123, "context": CONTEXT}, ["question: Input should be a valid string"]),
        ({"question": "Who?", "context": ["a", "b"]}, ["context: Input should be a valid string"]),
        ({"question": "Who?"}, ["context: missing"]),
        ([_ok(), {"question": "Who?"}], ["[1].context: missing"]),
        ({**_ok(), "contxt": "x"}, ["contxt: unknown field"]),
        ({**_ok(), "top_k": "3"}, ["top_k: Input should be a valid integer"]),
        ({**_ok(), "top_k": 0}, ["top_k: Input should be greater than or equal to 1"]),
        ({"question": "  ", "context": CONTEXT}, ["question: must not be empty"]),
        ("Who won?", ["(body): must be a JSON object"]),
        ([], ["the list of questions is empty"]),
    ],
)
def test_wrong_shapes_are_422_naming_the_field(client, payload, needles):
    body = _error(client.post("/v1/answer", json=payload, headers=KEY), 422, *needles)
    assert body["fields"] and all(f["field"] and f["message"] for f in body["fields"])
    assert CONTEXT not in body["error"]  # the input is never echoed


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"pairs": "x"}, "pairs: must be a list, not a string"),
        ({"pairs": {"question": "Who?"}}, "pairs: must be a list, not an object"),
        ({"pairs": ["Who?"]}, "pairs[0]: must be a JSON object"),
        ({"pairs": [{"question": "Who?", "context": 5}]}, "pairs[0].context: Input should be"),
        ({"pairs": []}, "pairs: the list of questions is empty"),
        (["Who?", "ctx"], "the body is a JSON list"),
    ],
)
def test_predict_alias_names_the_field_too(client, payload, needle):
    body = _error(client.post("/predict", json=payload, headers=KEY), 422, needle)
    assert body["fields"]
    if needle.startswith("pairs"):
        assert body["fields"][0]["field"].startswith("pairs")
        assert '{"pairs": [' in body["error"]  # its own usage


def test_limits_are_413_with_the_limit(client):
    _error(
        client.post("/v1/answer", json=_ok(c="x " * 150), headers=KEY),
        413,
        "300 characters",
        "at most 200",
        "--max-context-chars",
    )
    _error(
        client.post("/v1/answer", json=[_ok()] * 4, headers=KEY), 413, "4 questions", "at most 3"
    )
    big = json.dumps(_ok(c="x" * 300_000)).encode()
    _error(client.post("/v1/answer", content=big, headers=KEY), 413, "300,0", "250,000 bytes")


def test_a_streamed_body_is_counted(client):
    """Without a Content-Length (chunked), the bytes are counted as they arrive."""

    def chunks():
        for _ in range(10):
            yield b" " * 30_000

    _error(client.post("/v1/answer", content=chunks(), headers=KEY), 413, "250,000 bytes")


def test_a_post_says_it_sends_json(client):
    """A form-encoded or text body (curl -d without -H, a cross-site form, which a browser
    sends without asking first) is refused with the header to send, on every POST route."""
    for kind in (None, "text/plain", "application/x-www-form-urlencoded"):
        headers = {"X-API-Key": "s3cret", **({"Content-Type": kind} if kind else {})}
        body = json.dumps(_ok()).encode()
        for path in ("/v1/answer", "/predict", "/v1/explain"):
            _error(client.post(path, content=body, headers=headers), 415, "Content-Type")
    ok = client.post("/v1/answer", content=json.dumps(_ok()).encode(), headers=KEY)
    assert ok.status_code == 200


def test_only_the_names_of_this_server_are_answered(tiny_predictor: Predictor):
    """Bound to loopback, a page of another site whose name its DNS turned into 127.0.0.1 is
    same-origin with the service; the Host header it sends names that site, and is refused."""
    from structqa.commands.serve import allowed_hosts

    names = allowed_hosts("127.0.0.1", ["QA.internal:8080"])  # (as a Host header names it)
    assert allowed_hosts("0.0.0.0", []) == ()  # on every address: any name, unless given
    assert set(allowed_hosts("0.0.0.0", ["qa.example"])) >= {"localhost", "qa.example"}
    assert allowed_hosts("10.0.0.5", ["qa.example"]) == ("qa.example",)
    assert "localhost" in allowed_hosts("::ffff:127.0.0.1", [])
    assert "localhost" in allowed_hosts("::0", ["qa.example"])  # every address, spelt so
    with client_for(tiny_predictor, allowed_hosts=names) as c:
        for host in ("127.0.0.1:8000", "localhost", "localhost.:8000", "[::1]:8000", "qa.internal"):
            assert c.get("/health", headers={"Host": host}).status_code == 200, host
        _error(c.get("/health", headers={"Host": "evil.example"}), 400, "evil.example")
        _error(c.post("/v1/answer", json=_ok(), headers={"Host": "evil.example:8000"}), 400)


def _post_scope(path: str) -> dict:
    """The ASGI scope of a JSON POST to ``path``, for driving the app by hand."""
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"localhost")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "scheme": "http",
        "root_path": "",
        "http_version": "1.1",
        "asgi": {"version": "3.0"},
    }


def test_a_client_leaving_mid_body_is_not_a_server_error(tiny_predictor: Predictor):
    """Starlette raises ClientDisconnect from a body cut short by its client: once answered
    as a 500 with a traceback in the log, and counted so, it is a 499."""
    import asyncio

    with client_for(tiny_predictor) as c:
        app = c.app
        scope = _post_scope("/v1/answer")
        messages = iter(
            [
                {"type": "http.request", "body": b'{"question": "q', "more_body": True},
                {"type": "http.disconnect"},
            ]
        )
        sent: list[dict] = []

        async def receive() -> dict:
            return next(messages, {"type": "http.disconnect"})

        async def send(message: dict) -> None:
            sent.append(message)

        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] == 499
        metrics = c.get("/metrics").text
        assert 'route="/v1/answer",status="499"' in metrics.replace('method="POST",', "")
        assert 'status="500"' not in metrics


def test_api_key(client):
    _error(client.post("/v1/answer", json=_ok()), 401, "no API key", "X-API-Key")
    r = client.post("/v1/answer", json=_ok(), headers={"X-API-Key": "wrong"})
    assert _error(r, 401, "wrong API key") and r.headers["www-authenticate"] == "Bearer"
    bearer = {"Authorization": "Bearer s3cret"}
    assert client.post("/v1/answer", json=_ok(), headers=bearer).status_code == 200
    assert client.get("/health").status_code == 200  # GETs need no key
    assert client.get("/ready").json()["api_key_required"] is True


def test_unknown_route_and_method(client):
    _error(client.get("/nowhere"), 404, "no route GET /nowhere", "POST /v1/answer")
    r = client.get("/v1/answer")
    _error(r, 405, "GET is not allowed on /v1/answer", "POST")
    assert r.headers["allow"] == "POST"
    _error(client.delete("/health"), 405, "DELETE is not allowed")


def _blocked_worker(client):
    """Hold the inference thread until the returned event is set."""
    release = threading.Event()
    client.app.state.service.batcher.call(lambda: release.wait(30))
    return release


def test_a_full_queue_is_503_with_retry_after(tiny_predictor):
    with client_for(tiny_predictor, queue_size=1) as client:
        release = _blocked_worker(client)
        first: dict = {}
        t = threading.Thread(target=lambda: first.update(r=client.post("/v1/answer", json=_ok())))
        t.start()
        service = client.app.state.service
        for _ in range(500):
            if service.admitted:
                break
            time.sleep(0.01)
        r = client.post("/v1/answer", json=_ok())
        _error(r, 503, "busy", "--queue-size")
        assert r.headers["retry-after"] == "1"
        release.set()
        t.join(30)
        assert first["r"].status_code == 200


def test_a_request_past_its_deadline_is_504(tiny_predictor):
    with client_for(tiny_predictor, request_timeout=0.3) as client:
        release = _blocked_worker(client)
        try:
            _error(client.post("/v1/answer", json=_ok()), 504, "--request-timeout")
        finally:
            release.set()
        # the abandoned job is dropped; the next request is answered
        assert client.post("/v1/answer", json=_ok()).status_code == 200


def test_an_internal_error_is_500_without_internals(tiny_predictor, monkeypatch):
    with client_for(tiny_predictor) as client:

        def boom(*args, **kwargs):
            raise RuntimeError("secret internal detail in /srv/app/module.py")

        monkeypatch.setattr(client.app.state.service.batcher, "_forward", boom)
        r = client.post("/v1/answer", json=_ok())
        assert r.status_code == 500
        assert "logged it as" in r.json()["error"]
        assert "secret" not in r.text and "/srv/" not in r.text


def test_a_client_that_leaves_is_dropped(tiny_predictor):
    """A request whose client disconnects is cancelled: its windows never reach the model."""
    import asyncio

    from structqa.serving.app import create_app
    from structqa.serving.settings import ServeSettings

    app = create_app(tiny_predictor, ServeSettings())
    service = app.state.service
    service.start()
    try:
        assert service.wait_ready(60)
        release = threading.Event()
        service.batcher.call(lambda: release.wait(30))
        body = json.dumps(_ok()).encode()
        sent: list[dict] = []

        async def receive() -> dict:
            if not sent and not getattr(receive, "done", False):
                receive.done = True  # type: ignore[attr-defined]
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(0.2)  # then the client goes away
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = _post_scope("/v1/answer")
        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] == 499
        release.set()
        for _ in range(500):
            if service.batcher.pending_windows == 0:
                break
            time.sleep(0.01)
        assert service.batcher.pending_windows == 0
        text = service.metrics.render().decode()
        assert 'status="499"' in text
        assert "structqa_batch_windows_count 1.0" in text  # the warm-up's batch only
    finally:
        service.close()


@pytest.mark.parametrize("one_at_a_time", [False, True], ids=["batched", "one-at-a-time"])
def test_an_over_long_question_is_a_422_naming_the_limit_in_both_modes(
    tiny_predictor, one_at_a_time: bool
) -> None:
    """The Predictor's one policy for a user's question, whichever mode serves it: a question
    longer than data.max_query_len tokens is refused, never cut and answered."""
    limit = tiny_predictor.features.max_query_len
    long_question = " ".join(["which"] * (limit + 40)) + "?"
    with client_for(tiny_predictor, one_at_a_time=one_at_a_time) as client:
        one = client.post(
            "/v1/answer", json={"question": long_question, "context": "The Broncos won."}
        )
        assert one.status_code == 422, one.text
        assert f"more than the {limit} this model reads" in one.json()["error"]
        assert one.json()["fields"][0]["field"] == "question"
        many = client.post(
            "/v1/answer",
            json=[
                {"question": "Who won?", "context": "The Broncos won."},
                {"question": long_question, "context": "The Broncos won."},
            ],
        )
        assert many.status_code == 422 and "pair 1: the question has" in many.text
        assert many.json()["fields"][0]["field"] == "[1].question"  # as validation names it
        # the service goes on answering
        ok = client.post("/v1/answer", json={"question": "Who won?", "context": "The Broncos won."})
        assert ok.status_code == 200
