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
        "no_answer": a.no_answer,
        "nbest": [{"text": c.text, "probability": c.probability} for c in a.nbest[:n_best]],
    }


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
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
                return
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
                single = "pairs" not in req
                items = [req] if single else req["pairs"]
                pairs = [(str(it["question"]), str(it["context"])) for it in items]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                self._send(
                    HTTPStatus.BAD_REQUEST,
                    {"error": f"expected {{question, context}} or {{pairs: [...]}}: {e}"},
                )
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
