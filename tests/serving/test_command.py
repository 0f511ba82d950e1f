"""`structqa serve`: its flags, and the command itself started as a user starts it."""

from __future__ import annotations

import json
import urllib.request

from serving_support import CONTEXT, QUESTION, serve_command

from structqa.cli import build_parser


def test_flags_and_defaults():
    args = build_parser().parse_args(["serve", "ckpt"])
    assert args.host == "127.0.0.1" and args.port == 8000  # loopback unless told
    assert args.api_key is None and args.cors_origin == []
    assert args.max_batch_windows >= 1 and args.queue_size >= 1
    assert args.one_at_a_time is False  # micro-batching unless told
    assert build_parser().parse_args(["serve", "ckpt", "--one-at-a-time"]).one_at_a_time
    args = build_parser().parse_args(
        [
            "serve",
            "ckpt",
            "--max-batch-windows",
            "1",
            "--max-context-chars",
            "5",
            "--no-whole-words",
        ]
    )
    assert (args.max_batch_windows, args.max_context_chars, args.whole_words) == (1, 5, False)


def test_a_port_in_use_and_a_mistyped_index_fail_before_the_model_loads(tmp_path, capsys):
    """Said in one line naming what to change, before the model loads (the checkpoint given
    here holds no weights: loading it would be the error otherwise)."""
    import socket

    from structqa.cli import main

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"")
    missing = str(tmp_path / "ckpt")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", missing, "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port N" in err
    assert main(["serve", missing, "--port", "0", "--index", str(tmp_path / "idx")]) == 2
    assert "not a document index" in capsys.readouterr().err


def test_serve_command_answers_and_hides_paths(tiny_trained_run, monkeypatch):
    monkeypatch.setenv("STRUCTQA_API_KEY", "k")
    with serve_command(tiny_trained_run / "best", "--bf16", "off") as url:
        ready = json.loads(urllib.request.urlopen(url + "/ready", timeout=10).read())
        assert ready["api_key_required"] is True
        assert ready["model"]["name"] == "run/best" and "/" not in ready["model"]["encoder"]
        req = urllib.request.Request(
            url + "/v1/answer",
            json.dumps({"question": QUESTION, "context": CONTEXT}).encode(),
            {"Content-Type": "application/json", "X-API-Key": "k"},
        )
        body = json.loads(urllib.request.urlopen(req, timeout=30).read())
        assert CONTEXT[body["start"] : body["end"]] == body["answer"]
