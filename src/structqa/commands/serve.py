"""`structqa serve CHECKPOINT`: the HTTP service (FastAPI on uvicorn) on 127.0.0.1 by default."""

from __future__ import annotations

import argparse
import logging
import socket
import time
from pathlib import Path
from typing import Any

from structqa.commands.common import add_bf16_argument, command

log = logging.getLogger(__name__)

WHOLE_WORDS_HELP = (
    "widen answers that start or end inside a word to the whole word, or not "
    "(--no-whole-words); default: the checkpoint's decode.whole_words"
)


_SERVE_TEXT = """answer questions over HTTP (POST /v1/answer, a web page at /)

Serves a checkpoint: POST /v1/answer (and the old POST /predict), POST /v1/explain, GET /health,
/ready, /metrics, /docs and a web page at /. Requests that arrive together share forward passes
(micro-batching by windows).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from structqa.commands.common import add_runtime_argument
    from structqa.serving.settings import API_KEY_ENV, ServeSettings

    d = ServeSettings()
    sv = command(subparsers, "serve", _SERVE_TEXT)
    sv.add_argument(
        "checkpoint",
        nargs="?",
        help="a checkpoint or export directory (default: $STRUCTQA_READER, else the general "
        "reader built by `structqa reader build`)",
    )
    sv.add_argument(
        "--index",
        help="a document index (`structqa index`): adds POST /v1/search and POST /v1/ask and "
        "the page's documents mode",
    )
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    sv.add_argument("--port", type=int, default=8000, help="0: any free port (it is logged)")
    add_bf16_argument(sv)
    add_runtime_argument(sv)
    sv.add_argument("--whole-words", action=argparse.BooleanOptionalAction, help=WHOLE_WORDS_HELP)

    def setting(group: Any, name: str, help: str | None = None) -> None:
        """--NAME for the ServeSettings field NAME, with its type and default."""
        default = getattr(d, name)
        option = "--" + name.replace("_", "-")
        group.add_argument(option, type=type(default), default=default, help=help)

    b = sv.add_argument_group("batching")
    setting(b, "max_batch_windows", "windows in one forward pass (1: one window at a time)")
    setting(
        b,
        "max_wait_ms",
        "how long an idle worker waits for more windows before a batch that is not full",
    )
    b.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="process one request at a time, as a plain server with one lock would: a "
        "baseline for benchmarks",
    )
    setting(b, "queue_size", "requests in progress at once; more get 503 with Retry-After")
    lim = sv.add_argument_group("limits")
    setting(lim, "max_context_chars", "characters of one context; more get 413")
    setting(lim, "max_questions", "per request")
    setting(lim, "max_body_bytes", "bytes of one request body; more get 413")
    setting(lim, "request_timeout", "seconds; then 504")
    setting(lim, "body_timeout", "seconds for a whole body to arrive; then 408")
    lim.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds for a connection's request line and headers",
    )
    lim.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="open connections and requests in flight; more get a JSON 503 (counted in /metrics)",
    )
    lim.add_argument("--keep-alive", type=float, default=5.0, help="idle keep-alive seconds")
    sec = sv.add_argument_group("security")
    sec.add_argument(
        "--api-key",
        help=f"require this key on POST (header X-API-Key or Authorization: Bearer); "
        f"default: ${API_KEY_ENV} when set, else no key",
    )
    sec.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from ORIGIN (repeatable); default: no CORS",
    )
    sec.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the server answers to beside its loopback names (repeatable); on "
        "a loopback address other names are refused (DNS rebinding); on every address "
        "(0.0.0.0, ::), given: these and the loopback names; elsewhere, given: only these",
    )
    sv.set_defaults(func=cmd_serve)
    return sv


def allowed_hosts(bind: str, given: list[str]) -> tuple[str, ...]:
    """The Host names a server bound to ``bind`` answers to: on a loopback address its
    loopback names and ``given`` (a page of another site, renamed to 127.0.0.1 by its DNS,
    could read the service otherwise; a proxy on the machine that passes its public name on
    needs that name given); on every address, ``given`` and the loopback names, or any name
    (none given); on another address, ``given`` or any."""
    from structqa.serving.edge import host_name
    from structqa.serving.settings import LOOPBACK_NAMES, is_loopback

    names = tuple(host_name(name) for name in given if name.strip())
    if is_loopback(bind) or (names and _every_address(bind)):
        # (on every address, with names given: probes on the machine still say localhost)
        return (*LOOPBACK_NAMES, host_name(bind), *names)
    return names


def cmd_serve(args: argparse.Namespace, extra: list[str]) -> int:
    import uvicorn

    from structqa.commands.common import answering_predictor
    from structqa.config import from_attributes
    from structqa.paths import find_reader, no_reader_message
    from structqa.serving.app import create_app
    from structqa.serving.edge import guarded_h11
    from structqa.serving.settings import ServeSettings, api_key_from_env

    found = find_reader(args.checkpoint)
    if found is None:
        raise ValueError(no_reader_message())
    args.checkpoint = str(found)
    settings = from_attributes(  # the options are named after the settings
        ServeSettings,
        args,
        api_key=api_key_from_env(args.api_key),
        cors_origins=tuple(args.cors_origin),
        allowed_hosts=allowed_hosts(args.host, args.allowed_host),
        model_name="/".join(Path(args.checkpoint).resolve().parts[-2:]),  # e.g. qs-dyrex/best
    )
    for name in (
        "max_batch_windows",
        "queue_size",
        "max_context_chars",
        "max_questions",
        "max_body_bytes",
    ):
        if getattr(settings, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    # (0 would answer every request 504, 408 or 503)
    for option, value in (
        ("--request-timeout", settings.request_timeout),
        ("--body-timeout", settings.body_timeout),
        ("--header-timeout", args.header_timeout),
        ("--keep-alive", args.keep_alive),
        ("--max-connections", args.max_connections),
    ):
        if not value > 0:  # (nan too)
            raise ValueError(f"{option} must be above 0, got {value}")
    if not settings.max_wait_ms >= 0:
        raise ValueError(f"--max-wait-ms must be 0 or more, got {settings.max_wait_ms}")
    if args.index:  # a mistyped index fails before the model loads, as for `ask`
        from structqa.documents.index import require_index

        require_index(args.index)
    # the socket first: a port in use fails before the model loads
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as err:
        sock.close()
        raise OSError(
            f"cannot listen on {args.host}:{args.port} ({err.strerror or err}): another "
            "program (another `structqa serve`?) uses it; give --port N (0: any free port)"
        ) from None
    t0 = time.perf_counter()
    predictor = answering_predictor(args)  # (an int8 export it makes first is counted too)
    load_seconds = time.perf_counter() - t0  # the model's alone: the index opens after
    documents = None
    if args.index:
        from structqa.serving.documents import DocumentService

        documents = DocumentService(args.index, args.checkpoint, predictor.runtime)
        log.info("index %s: %d chunks", args.index, documents.info["chunks"])
    app = create_app(predictor, settings, load_seconds, documents)
    config = uvicorn.Config(
        app,
        http=guarded_h11(args.header_timeout, args.max_connections),
        timeout_keep_alive=args.keep_alive,
        server_header=False,
        access_log=False,
        log_config=None,  # structqa's logging setup
    )
    port = sock.getsockname()[1]
    log.info(
        "serving %s on http://%s:%d (page /, POST /v1/answer, /docs, /metrics)%s",
        args.checkpoint,
        args.host,
        port,
        "; an API key is required on POST" if settings.api_key else "",
    )
    if settings.allowed_hosts:  # (behind a proxy that passes its public name on: add it)
        log.info(
            "answering the Host names %s only (--allowed-host NAME adds one)",
            ", ".join(settings.allowed_hosts),
        )
    print(f"structqa serve: listening on http://{args.host}:{port}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _every_address(bind: str) -> bool:
    """Whether ``bind`` is the address of every interface (0.0.0.0, ::, ::0, ...)."""
    import ipaddress

    if not bind.strip():
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_unspecified
    except ValueError:
        return False
