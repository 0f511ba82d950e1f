"""A small JSON-over-HTTP service around a :class:`Predictor` (standard library only).

POST /predict  {"question": ..., "context": ...}            -> one answer
POST /predict  {"pairs": [{"question": ..., "context": ...}]} -> a list of answers
GET  /health                                                  -> {"status": "ok"}
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from structqa.serving.predictor import Answer, Predictor

log = logging.getLogger(__name__)
MAX_BODY = 5 * 1024 * 1024


def answer_json(a: Answer, n_best: int = 5) -> dict[str, Any]:
    return {
        "answer": a.text,
        "start": a.start,
        "end": a.end,
        "score": a.score,
        "probability": a.probability,
        "no_answer": a.no_answer,
        "answerable": a.answerable,
        "calibrated": a.calibrated,
        "nbest": [{"text": c.text, "probability": c.probability} for c in a.nbest[:n_best]],
    }


def parse_request(body: bytes) -> tuple[list[tuple[str, str]], bool]:
    """The (question, context) pairs of a /predict body, and whether it asked for one answer.

    A body that is not UTF-8 JSON of the documented shape, or whose question or context is
    not a string, is a ValueError whose message says what is wrong (the client gets a 400)."""
    usage = 'expected {"question": str, "context": str} or {"pairs": [{...}, ...]}'
    try:
        req = json.loads(body.decode("utf-8") or "{}")
    except UnicodeDecodeError as e:
        raise ValueError(f"the body is not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"the body is not JSON ({e}); {usage}") from None
    if not isinstance(req, dict):
        raise ValueError(f"the body is a JSON {type(req).__name__}; {usage}")
    single = "pairs" not in req
    items = [req] if single else req["pairs"]
    if not isinstance(items, list):
        raise ValueError(f"'pairs' must be a list; {usage}")
    pairs = []
    for i, item in enumerate(items):
        where = "the body" if single else f"pairs[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} is not an object; {usage}")
        for key in ("question", "context"):
            if key not in item:
                raise ValueError(f"{where}: missing '{key}'; {usage}")
            if not isinstance(item[key], str):
                raise ValueError(
                    f"{where}: '{key}' must be a string, not {type(item[key]).__name__}"
                )
        pairs.append((item["question"], item["context"]))
    return pairs, single


def make_server(
    predictor: Predictor, host: str = "127.0.0.1", port: int = 8000
) -> ThreadingHTTPServer:
    lock = threading.Lock()  # one forward pass at a time: the CPU is the bottleneck anyway

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(HTTPStatus.OK, {"status": "ok"})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/predict":
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self._send(HTTPStatus.BAD_REQUEST, {"error": "bad Content-Length header"})
                return
            if length > MAX_BODY:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
                return
            try:
                pairs, single = parse_request(self.rfile.read(length))
            except ValueError as e:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)})
                return
            try:
                with lock:
                    answers = predictor.predict_batch(pairs)
            except ValueError as e:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)})
                return
            out = [answer_json(a) for a in answers]
            self._send(HTTPStatus.OK, out[0] if single else out)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.info("%s %s", self.address_string(), fmt % args)

    return ThreadingHTTPServer((host, port), Handler)
