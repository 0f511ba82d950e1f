"""Fixtures of the service tests: the tiny trained checkpoint served in-process (TestClient) or
on a loopback port (uvicorn in a thread), with chosen settings."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from structqa.serving.app import create_app
from structqa.serving.predictor import Predictor
from structqa.serving.settings import ServeSettings

QUESTION = "Who won?"
CONTEXT = "The Denver Broncos won the game against the Panthers."


@pytest.fixture(scope="session")
def tiny_predictor(tiny_trained_run: Path) -> Predictor:
    return Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")


@contextmanager
def client_for(predictor: Predictor, **settings) -> Iterator:
    """A TestClient of an app with these settings, once its warm-up answer went through."""
    from fastapi.testclient import TestClient

    app = create_app(predictor, ServeSettings(**settings))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.service.wait_ready(60), app.state.service.status
        yield client


@contextmanager
def served(predictor: Predictor, header_timeout: float = 10.0, **settings) -> Iterator[str]:
    """The app on a free loopback port (uvicorn in a thread, with the CLI's protocol); yields
    its base URL."""
    import uvicorn

    from structqa.serving.edge import guarded_h11

    app = create_app(predictor, ServeSettings(**settings))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http=guarded_h11(header_timeout), log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert app.state.service.wait_ready(60), app.state.service.status
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
