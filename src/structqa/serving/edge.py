"""What is decided at the edge, before a request reaches a route: body size and pace, the API
key, the metrics of every reply; and, below the application, a deadline for the request head.

Plain ASGI middlewares (no per-request task or body copy): :class:`EdgeGuard` refuses a
declared Content-Length over the limit before a byte of the body is read, counts the bytes
of a streamed body, gives the whole body ``body_timeout`` seconds (a stalled or trickling
upload gets a 408 instead of holding its connection forever) and checks the API key on
POST. :class:`HttpMetrics` counts every reply by route and status and times it.
:func:`guarded_h11` is uvicorn's HTTP/1.1 protocol with a deadline for the request line and
headers (uvicorn's own keep-alive timeout does not cover a connection that opens and then
sends its headers slowly), and with ``--max-connections`` decided here rather than by uvicorn:
uvicorn answers a request over its ``limit_concurrency`` with a plain-text 503 below the
application, which neither the metrics nor a client reading JSON errors would see.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.requests import Request

from structqa.serving.parsing import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

API_KEY_HEADER = "x-api-key"
# set in a request's scope by the guarded protocol when it arrived over --max-connections
OVER_LIMIT = "structqa.over_connection_limit"
# the methods the metrics name; any other (a client may send any token) counts as "other",
# so that clients cannot grow the metrics without bound
METHODS = frozenset(("GET", "POST", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"))


def error_body(status: int, message: str, fields: list[dict[str, str]] | None = None) -> bytes:
    body: dict[str, Any] = {"error": message, "status": status}
    if fields:
        body["fields"] = fields
    return json.dumps(body).encode()


async def send_error(send: Send, err: ApiError) -> None:
    body = error_body(err.status, err.message, err.fields)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode(), v.encode()) for k, v in err.headers.items()),
    ]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def host_name(header: str) -> str:
    """The name a Host header (or ``--allowed-host``) gives, lower-cased, without its port
    or a final dot (``[::1]:8000`` is ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        name = header[1 : header.find("]")] if "]" in header else header
    else:
        name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".")  # (``localhost.`` is localhost)


def presented_key(scope: Scope) -> str | None:
    """The API key of a request: ``X-API-Key: KEY`` or ``Authorization: Bearer KEY``."""
    key = _header(scope, API_KEY_HEADER.encode())
    if key is not None:
        return key
    auth = _header(scope, b"authorization") or ""
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


class EdgeGuard:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_timeout: float,
        api_key: str | None = None,
        allowed_hosts: tuple[str, ...] = (),
    ):
        self.app, self.max_body_bytes, self.body_timeout = app, max_body_bytes, body_timeout
        self.api_key = api_key
        self.allowed_hosts = frozenset(host_name(h) for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check_limit(scope)
            self._check_head(scope)
        except ApiError as err:
            await send_error(send, err)
            return
        await self.app(scope, self._limited(receive), send)

    @staticmethod
    def _check_limit(scope: Scope) -> None:
        over = scope.get(OVER_LIMIT)
        if over is not None:
            connections, in_flight, limit = over
            raise ApiError(
                503,
                f"the server is busy: {connections} connections are open and {in_flight} "
                f"requests in flight, over its limit of {limit} (--max-connections); retry "
                "shortly",
                {"Retry-After": "1", "Connection": "close"},
            )

    def _check_head(self, scope: Scope) -> None:
        header = _header(scope, b"host")
        # a page of another site renamed to this address (DNS rebinding) names that site; a
        # request without a Host (an HTTP/1.0 probe) is no browser's
        if self.allowed_hosts and header is not None:
            host = host_name(header)
            if host not in self.allowed_hosts:
                raise ApiError(
                    400,
                    f"the Host header names {host or 'nothing'!r}, not this server "
                    f"({', '.join(sorted(self.allowed_hosts))}); a name of its own is allowed "
                    "with --allowed-host NAME",
                )
        if scope["method"] == "POST":  # (a JSON type makes a browser ask first: CORS preflight)
            kind = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if kind != "application/json" and not kind.endswith("+json"):
                raise ApiError(
                    415,
                    f"the body's Content-Type is {kind or 'not given'!r}: send JSON with the "
                    "header 'Content-Type: application/json'",
                )
        if self.api_key is not None and scope["method"] == "POST":
            key = presented_key(scope)
            if key is None or not hmac.compare_digest(key.encode(), self.api_key.encode()):
                what = "a wrong API key" if key else "no API key"
                raise ApiError(
                    401,
                    f"this server needs an API key on POST and the request has {what}: send "
                    "the header 'X-API-Key: KEY' or 'Authorization: Bearer KEY'",
                    {"WWW-Authenticate": "Bearer"},
                )
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise ApiError(413, self._too_large(f"a body of {int(length):,} bytes"))

    def _too_large(self, what: str) -> str:
        return (
            f"{what} is over this server's limit of {self.max_body_bytes:,} bytes "
            "(--max-body-bytes); send fewer or shorter passages"
        )

    def _limited(self, receive: Receive) -> Receive:
        seen = 0
        done = False
        deadline = time.monotonic() + self.body_timeout

        async def receive_limited() -> Message:
            nonlocal seen, done
            if done:  # (later receives wait for a disconnect: no deadline)
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except TimeoutError:
                raise ApiError(
                    408,
                    f"the request body did not arrive within {self.body_timeout:g} s "
                    "(--body-timeout); send the whole body promptly",
                ) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise ApiError(413, self._too_large(f"the body (over {seen:,} bytes so far)"))
                done = not message.get("more_body", False)
            else:
                done = True
            return message

        return receive_limited


class HttpMetrics:
    """Counts replies by route, method and status and times them (the outermost layer, so a
    refusal at the edge is counted too). ``route_of`` maps a path to a bounded label."""

    def __init__(self, app: ASGIApp, metrics: Any, route_of: Callable[[str], str]):
        self.app, self.metrics, self.route_of = app, metrics, route_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500  # an exception before any reply

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.observe_request(
                self.route_of(scope["path"]), method, status, time.perf_counter() - t0
            )


def guarded_h11(header_timeout: float, max_connections: int | None = None) -> type:
    """uvicorn's H11Protocol, closing a connection whose next request line and headers have not
    all arrived ``header_timeout`` seconds after it opened or after its previous reply (slow
    or idle clients cannot hold connections, and so ``--max-connections`` slots, forever).

    With ``max_connections``, a request that arrives while more connections are open or more
    requests are in flight (itself counted) goes through the application marked
    :data:`OVER_LIMIT`, where :class:`EdgeGuard` refuses it with a JSON 503 that
    :class:`HttpMetrics` counts; uvicorn's own ``limit_concurrency`` stays unset."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if max_connections is not None:
                self.app = self._limited(self.app, max_connections)

        def _limited(self, app: ASGIApp, limit: int) -> ASGIApp:
            async def limited(scope: Scope, receive: Receive, send: Send) -> None:
                # this connection and this request's task are in the counts already
                open_now, in_flight = len(self.connections), len(self.tasks)
                if scope["type"] == "http" and (open_now > limit or in_flight > limit):
                    scope[OVER_LIMIT] = (open_now, in_flight, limit)
                await app(scope, receive, send)

            return limited

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_timeout, self._expire, self.cycle)

        def _expire(self, cycle: Any) -> None:
            # no new request began since the timer was armed (a request replaces self.cycle)
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


@asynccontextmanager
async def disconnect_watch(request: Request):
    """A future that completes when the client disconnects (the body is read by then, so the
    next ASGI message can only be the disconnect)."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(wait())
    try:
        yield gone
    finally:
        gone.cancel()
