"""Helpers of the service tests: the app in-process (TestClient), on a loopback port (uvicorn
in a thread) or as `structqa serve` in a subprocess, with chosen settings."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from structqa.prediction.predictor import Predictor
from structqa.serving.app import create_app
from structqa.serving.settings import ServeSettings

QUESTION = "Who won?"
CONTEXT = "The Denver Broncos won the game against the Panthers."


@contextmanager
def client_for(predictor: Predictor, **settings) -> Iterator:
    """A TestClient of an app with these settings, once its warm-up answer went through."""
    from fastapi.testclient import TestClient

    app = create_app(predictor, ServeSettings(**settings))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.service.wait_ready(60), app.state.service.status
        yield client


@contextmanager
def served(
    predictor: Predictor,
    header_timeout: float = 10.0,
    max_connections: int | None = None,
    **settings,
) -> Iterator[str]:
    """The app on a free loopback port (uvicorn in a thread, with the CLI's protocol); yields
    its base URL."""
    import uvicorn

    from structqa.serving.edge import guarded_h11

    app = create_app(predictor, ServeSettings(**settings))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        http=guarded_h11(header_timeout, max_connections),
        log_config=None,
        access_log=False,
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


@contextmanager
def serve_command(checkpoint: Path, *flags: str, timeout: float = 120) -> Iterator[str]:
    """`structqa serve CHECKPOINT --port 0 FLAGS` in a subprocess, as a user starts it; yields
    its URL once GET /ready answers 200, and stops it after."""
    import os
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "structqa.cli", "serve", str(checkpoint), "--port", "0", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    found = threading.Event()

    def drain() -> None:  # (the log goes to stdout too: a full pipe would stall the server)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "listening on http://" in line:
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        found.wait(timeout)
        said = [ln for ln in lines if "listening on http://" in ln]
        assert said, f"serve printed {''.join(lines)[-2000:]!r}, exit {proc.poll()}"
        url = said[0].split("listening on ")[1].strip()
        end = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url + "/ready", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, f"serve exited with {proc.returncode}"
            assert time.monotonic() < end, "serve did not get ready"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
