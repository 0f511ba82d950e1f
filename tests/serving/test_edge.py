"""The edge over a real socket (uvicorn with the CLI's protocol): slow or stalled clients are
cut off, oversized bodies refused before they are read, bad HTTP gets a 4xx."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import pytest
from serving_support import CONTEXT, QUESTION, served

from structqa.prediction.predictor import Predictor


@pytest.fixture(scope="module")
def url(tiny_predictor: Predictor):
    with served(
        tiny_predictor, header_timeout=0.5, body_timeout=0.5, max_body_bytes=10_000
    ) as base:
        yield base


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _reply(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of the reply on ``sock`` (read until the server closes or the
    announced length arrived)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split()[1]), body


def _head(length: int | str, path: str = "/v1/answer") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_request_is_answered(url):
    body = json.dumps({"question": QUESTION, "context": CONTEXT}).encode()
    with _connect(url) as sock:
        sock.sendall(_head(len(body)) + body)
        status, reply = _reply(sock)
    assert status == 200 and json.loads(reply)["answer"]


def test_slow_headers_are_cut_off(url):
    with _connect(url) as sock:
        sock.sendall(b"POST /v1/answer HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        t0 = time.monotonic()
        assert sock.recv(1024) == b""  # the server closed the connection
    assert time.monotonic() - t0 < 9  # (the header timeout is 0.5 s; recv gives up at 10)


def test_an_idle_connection_is_closed(url):
    with _connect(url) as sock:
        assert sock.recv(1024) == b""


def test_a_stalled_body_is_408(url):
    with _connect(url) as sock:
        sock.sendall(_head(100) + b'{"question": ')
        status, reply = _reply(sock)
    assert status == 408 and "did not arrive within" in json.loads(reply)["error"]


def test_a_trickled_body_is_408(url):
    """A byte every 0.1 s never stalls for long, but the whole body has a deadline."""
    with _connect(url) as sock:
        sock.sendall(_head(100))
        for _ in range(20):
            try:
                sock.sendall(b" ")
            except OSError:  # the server replied and closed
                break
            time.sleep(0.1)
        status, reply = _reply(sock)
    assert status == 408 and "--body-timeout" in json.loads(reply)["error"]


def test_an_oversized_body_is_refused_before_it_is_read(url):
    with _connect(url) as sock:
        sock.sendall(_head(10**9))  # announces a gigabyte and sends none of it
        status, reply = _reply(sock)
    assert status == 413 and "1,000,000,000 bytes" in json.loads(reply)["error"]


@pytest.mark.parametrize("length", ["abc", "-5"])
def test_a_bad_content_length_is_400(url, length):
    with _connect(url) as sock:
        sock.sendall(_head(length) + b"{}")
        status, _ = _reply(sock)
    assert status == 400


def test_not_utf8_is_400_over_the_wire(url):
    body = '{"question":"\xff\xfe","context":"abc"}'.encode("latin-1")
    with _connect(url) as sock:
        sock.sendall(_head(len(body)) + body)
        status, reply = _reply(sock)
    assert status == 400 and "not UTF-8" in json.loads(reply)["error"]


def test_a_request_over_max_connections_gets_a_counted_json_503(tiny_predictor: Predictor):
    """Two connections held open fill a limit of 2: a third one's request is refused with a
    JSON 503 that /metrics counts, and once they close the next request is answered."""
    body = json.dumps({"question": QUESTION, "context": CONTEXT}).encode()
    with served(tiny_predictor, max_connections=2) as base:
        held = [_connect(base), _connect(base)]
        time.sleep(0.2)  # (the server has accepted them)
        with _connect(base) as sock:
            sock.sendall(_head(len(body)) + body)
            status, reply = _reply(sock)
        assert status == 503
        error = json.loads(reply)["error"]
        assert "3 connections are open" in error and "--max-connections" in error
        for sock in held:
            sock.close()
        time.sleep(0.2)
        with _connect(base) as sock:
            sock.sendall(_head(len(body)) + body)
            assert _reply(sock)[0] == 200
        with _connect(base) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            metrics = _reply(sock)[1].decode()
    assert 'route="/v1/answer",status="503"} 1.0' in metrics
