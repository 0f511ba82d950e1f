"""The HTTP service (FastAPI): a :class:`Predictor` behind a micro-batching worker.

POST /v1/answer   {question, context, top_k?} or a list of them -> answers (in order)
POST /v1/explain  {question, context} -> where the start/end queries attend (JSON)
POST /predict     the old shapes {question, context} / {pairs: [...]} (kept as an alias)
GET  /health      liveness; GET /ready: model loaded and warmed; GET /metrics: Prometheus
GET  /docs        the OpenAPI UI (assets served from the swagger-ui-bundle package, offline)
GET  /            the web page (static files shipped in the package)

The model is a resource created before the app (:class:`Service`); the event loop parses,
checks limits and awaits futures, and never runs the model or the tokenizer: featurization
runs on a small thread pool and every forward pass on the one inference thread
(:class:`structqa.serving.batcher.Batcher`); with ``one_at_a_time`` (a benchmark's baseline)
that thread instead runs each request whole, ``Predictor.predict_batch``, before the next.
Every refusal is a JSON ``{"error", "status"}`` whose message says what to do; an unexpected
failure is logged with its traceback and the client sees only a reference to the log line.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from structqa.prediction.predictor import Answer, Predictor, QuestionTooLong
from structqa.serving.batcher import SHAPE_MULTIPLE, Batcher, BatchStats, Featurizer
from structqa.serving.documents import DocumentService, add_document_routes
from structqa.serving.edge import EdgeGuard, HttpMetrics, disconnect_watch, error_body
from structqa.serving.metrics import ServeMetrics
from structqa.serving.parsing import (
    ApiError,
    Questions,
    explain_body,
    parse_json,
    questions_body,
    under_pairs,
    validation_fields,
)
from structqa.serving.schemas import (
    AnswerOut,
    ErrorOut,
    ExplainItem,
    Health,
    Readiness,
    check_text,
)
from structqa.serving.settings import ServeSettings

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
CLIENT_GONE = 499  # (nginx's code) what the metrics count when the client left first
EXPLAIN_MAX_CHARS = 20_000  # explain scores each window on its own, then the best again
ROUTES = ("/", "/health", "/ready", "/metrics", "/docs", "/openapi.json")
ROUTES += ("/v1/answer", "/v1/explain", "/predict", "/v1/search", "/v1/ask")


class Service:
    """The model as a resource: featurizer, batcher, admission and deadline."""

    def __init__(
        self,
        predictor: Predictor,
        settings: ServeSettings,
        metrics: ServeMetrics,
        load_seconds: float = 0.0,
    ):
        self.predictor, self.settings, self.metrics = predictor, settings, metrics
        predictor.pad_to_multiple = SHAPE_MULTIPLE  # both paths (one at a time too)
        cfg = predictor.config
        # names, never the server's paths: the last parts of a checkpoint or encoder dir
        self.info = {
            "name": settings.model_name,
            "head": str(cfg.model.head),
            "encoder": Path(str(cfg.model.encoder)).name,
        }
        # an exported graph draws no attention: the weights it was exported from do, loaded on
        # the first explain; the page shows the toggle by what /ready says, known from the
        # checkpoint's config without loading them
        self.explain_kind = _explain_kind(predictor.attention_head())
        self.no_explain = _no_explain(predictor, self.info["head"])
        self.status = "loading"
        self._explain_tagger: Any = None  # made on the first map of a model reading tags
        self.admitted = 0  # touched on the event loop only
        self.featurizer: Featurizer | None = None
        self.batcher: Batcher | None = None
        metrics.model_load_seconds.set(load_seconds)

    def start(self) -> None:
        """Start the workers and warm them up on a thread (GET /ready turns 200 after)."""
        s = self.settings
        self.featurizer = Featurizer(self.predictor, s.featurize_threads)
        self.batcher = Batcher(self.predictor, s.max_batch_windows, s.max_wait_ms, self._batched)
        self.metrics.track_queue(lambda: self.admitted, lambda: self.batcher.pending_windows)
        threading.Thread(target=self._warm_up, name="warm-up", daemon=True).start()

    def _batched(self, stats: BatchStats) -> None:
        self.metrics.observe_batch(stats.windows, stats.requests, stats.seconds, stats.passes)

    def _warm_up(self) -> None:
        t0 = time.perf_counter()
        try:
            assert self.featurizer is not None and self.batcher is not None
            pair = ("What is warmed up?", "The model is warmed up before the first request.")
            examples, features = self.featurizer.submit([pair]).result()
            self.batcher.submit(examples, features).future.result()
        except Exception:
            log.exception("the warm-up answer failed; the service stays not ready")
            self.status = "failed"
            return
        self.metrics.warmup_seconds.set(time.perf_counter() - t0)
        # The model, tokenizer and libraries are millions of long-lived objects that every full
        # collection of the cyclic garbage collector walks, with every thread stopped (while
        # the server starts: 35-164 ms each). Frozen, a collection during serving walks only
        # what requests create.
        gc.collect()
        gc.freeze()
        self.status = "ready"
        log.info("model warmed up in %.2f s; ready", time.perf_counter() - t0)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        end = time.monotonic() + timeout
        while self.status == "loading" and time.monotonic() < end:
            time.sleep(0.02)
        return self.status == "ready"

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        if self.featurizer is not None:
            self.featurizer.close()

    def _admit(self) -> None:
        if self.status == "failed":  # no retry helps: the warm-up's error is in the log
            raise ApiError(
                503, "the model failed to answer its warm-up question; see the server's log"
            )
        if self.status != "ready":
            raise ApiError(
                503,
                f"the model is not ready ({self.status}); see GET /ready",
                {"Retry-After": "5"},
            )
        if self.admitted >= self.settings.queue_size:
            raise ApiError(
                503,
                f"the server is busy: {self.admitted} requests are in progress, the most it "
                "queues (--queue-size); retry shortly",
                {"Retry-After": "1"},
            )

    @contextmanager
    def admitted_request(self) -> Iterator[None]:
        """Count a request that is not an answer (a search) against --queue-size."""
        self._admit()
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1

    async def within(self, fut: Any, deadline: float, gone: asyncio.Future | None) -> Any:
        """The result of the concurrent future ``fut``; cancelled (so the worker drops its
        windows) at the deadline (504) or when the client disconnects (``gone``)."""
        wrapped = asyncio.wrap_future(fut)
        waiters = {wrapped} if gone is None else {wrapped, gone}
        left = deadline - time.monotonic()
        done, _ = await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if wrapped in done:
            return wrapped.result()
        wrapped.cancel()
        if gone is not None and gone in done:
            raise ApiError(CLIENT_GONE, "the client disconnected before the answer")
        raise ApiError(
            504,
            f"no answer within {self.settings.request_timeout:g} s (--request-timeout): the "
            "server is overloaded or the passage is very long; retry or send less",
        )

    async def answer(
        self,
        pairs: list[tuple[str, str]],
        gone: asyncio.Future | None = None,
        deadline: float | None = None,
        listed: bool | None = None,
    ) -> list[Answer]:
        """The answers to ``pairs``, by ``deadline`` (time.monotonic; default: the request
        timeout from now; a search before them counts toward it) or a 504. ``listed``: the
        body was a list, whose fields an error names ``[N].question`` (default: when more
        than one pair)."""
        self._admit()
        self.admitted += 1
        if deadline is None:
            deadline = time.monotonic() + self.settings.request_timeout
        try:
            assert self.featurizer is not None and self.batcher is not None
            if self.settings.one_at_a_time:  # the whole request on the inference thread
                whole = self.batcher.call(lambda: self.predictor.predict_batch(pairs))
                return await self.within(whole, deadline, gone)
            examples, features = await self.within(self.featurizer.submit(pairs), deadline, gone)
            job = self.batcher.submit(examples, features)
            return await self.within(job.future, deadline, gone)
        except QuestionTooLong as err:  # the Predictor's one policy, in both modes
            listed = len(pairs) > 1 if listed is None else listed
            where = f"[{err.index}].question" if listed else "question"  # as pydantic's
            raise ApiError(422, str(err), fields=[{"field": where, "message": str(err)}]) from None
        finally:
            self.admitted -= 1

    async def check_question(
        self, question: str, deadline: float, gone: asyncio.Future | None = None
    ) -> None:
        """A 422 naming ``question`` where the model would refuse it as too long (as
        :meth:`answer` refuses it), checked on a featurizer thread; for an admitted request
        (POST /v1/ask, before it searches: no search for a question that cannot be read)."""
        assert self.featurizer is not None
        try:
            await self.within(self.featurizer.submit_check(question), deadline, gone)
        except QuestionTooLong as err:
            fields = [{"field": "question", "message": str(err)}]
            raise ApiError(422, str(err), fields=fields) from None

    async def explain(
        self, question: str, context: str, gone: asyncio.Future | None = None
    ) -> dict[str, Any]:
        if self.explain_kind is None:
            raise ApiError(404, self.no_explain)
        self._admit()
        self.admitted += 1
        deadline = time.monotonic() + self.settings.request_timeout
        try:
            assert self.batcher is not None
            call = self.batcher.call(lambda: self._explain(question, context))
            return await self.within(call, deadline, gone)
        except QuestionTooLong as err:  # refused as /v1/answer refuses it, never cut
            fields = [{"field": "question", "message": str(err)}]
            raise ApiError(422, str(err), fields=fields) from None
        finally:
            self.admitted -= 1

    def _explain(self, question: str, context: str) -> dict[str, Any]:
        from structqa.analysis import explain

        p = self.predictor
        if self._explain_tagger is None and p.annotator is not None:
            # the inference thread's own tagger (the featurizers share the predictor's under
            # a lock): spaCy loaded once, not on every map, and no training cache written
            from structqa.features.squad import tag_annotator

            self._explain_tagger = tag_annotator(p.features, answering=True)
        att = explain(
            p.attention_model(),
            p.tokenizer,
            p.config,
            question,
            context,
            bf16="on" if p.bf16 else "off",
            whole_words=p.decode.whole_words,
            annotator=self._explain_tagger,
        )
        out = att.to_dict()
        del out["question"], out["context"]  # the client has them
        return out


def _no_explain(predictor: Predictor, head: str) -> str:
    """Why POST /v1/explain has no map to draw: an exported graph served without the
    checkpoint it came from has no torch weights to draw one (whatever its head), else the
    head draws none."""
    if predictor.checkpoint is None and predictor.runtime.startswith("onnx"):
        from structqa.runtimes.onnx_model import read_export

        source = predictor.source and read_export(predictor.source).get("checkpoint")
        made_from = f" ({source})" if source else ""
        return (
            "attention maps need the torch weights, which an ONNX export directory served "
            f"alone lacks: serve the checkpoint it was exported from{made_from} (answers "
            "then come from its own onnx/ export where there is one, else from torch; "
            "STRUCTQA_AUTO_EXPORT=off keeps it from trying to make one)"
        )
    return f"no attention map for the {head} head"


def _explain_kind(head: Any) -> str | None:
    from structqa.analysis.attention_maps import MAP_MAKERS

    source = getattr(head, "queries", None)
    for cls, (kind, _) in MAP_MAKERS.items():
        if isinstance(source, cls):
            return kind
    return None


def answer_json(a: Answer, top_k: int, info: dict[str, str]) -> dict[str, Any]:
    """An Answer as the body of POST /v1/answer (:class:`AnswerOut`): the Answer's own JSON
    and the model that gave it."""
    return a.to_json(top_k) | {"model": info}


#: the keys the old /predict replied with (unchanged)
LEGACY_KEYS = ("answer", "start", "end", "score", "probability", "no_answer")


def legacy_json(a: Answer, n_best: int = 5) -> dict[str, Any]:
    """An Answer as the old /predict replied (unchanged keys)."""
    full = a.to_json(n_best)
    nbest = [{"text": c["text"], "probability": c["probability"]} for c in full["nbest"]]
    return {k: full[k] for k in LEGACY_KEYS} | {"nbest": nbest}


def route_label(path: str) -> str:
    if path in ROUTES:
        return path
    if path.startswith("/static/") or path.startswith("/docs-assets/"):
        return path.split("/", 2)[1]
    return "other"


def create_app(
    predictor: Predictor,
    settings: ServeSettings | None = None,
    load_seconds: float = 0.0,
    documents: DocumentService | None = None,
) -> FastAPI:
    """The service around a loaded ``predictor``; its workers start with the app (lifespan)
    and it reports ready once a warm-up answer went through them. With ``documents`` (an
    open index) it also searches and answers over the index (POST /v1/search, /v1/ask)."""
    settings = settings or ServeSettings()
    metrics = ServeMetrics()
    service = Service(predictor, settings, metrics, load_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        try:
            yield
        finally:
            service.close()
            if documents is not None:
                documents.close()

    errors = {s: {"model": ErrorOut} for s in (400, 401, 408, 413, 422, 503, 504)}
    app = FastAPI(
        title="structqa",
        summary="Extractive question answering over a passage",
        version="1",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = service
    _add_error_handlers(app)
    _add_docs(app)

    # typed bodies: each route gets its parsed, validated request from a dependency
    answer_body = Depends(questions_body(settings.max_questions, settings.max_context_chars))
    legacy_body = Depends(
        questions_body(settings.max_questions, settings.max_context_chars, legacy=True)
    )
    explain_limit = (
        "--max-context-chars"
        if settings.max_context_chars <= EXPLAIN_MAX_CHARS
        else "explain's own limit: each window is read twice; /v1/answer takes longer passages"
    )
    explain_request = Depends(
        explain_body(min(settings.max_context_chars, EXPLAIN_MAX_CHARS), explain_limit)
    )

    @app.post(
        "/v1/answer",
        response_model=AnswerOut | list[AnswerOut],
        responses=errors,
        openapi_extra=_body_schema("AnswerRequest"),
        summary="Answer one question, or a list of them, about a passage",
    )
    async def answer(request: Request, body: Questions = answer_body) -> Any:
        async with disconnect_watch(request) as gone:
            answers = await service.answer(body.pairs, gone, listed=not body.single)
        out = [
            answer_json(a, i.top_k, service.info) for a, i in zip(answers, body.items, strict=True)
        ]
        return out[0] if body.single else out  # validated and written by response_model

    @app.post("/predict", responses=errors, deprecated=True, summary="Old shape of /v1/answer")
    async def predict(request: Request, body: Questions = legacy_body) -> Any:
        async with disconnect_watch(request) as gone:
            try:
                answers = await service.answer(body.pairs, gone, listed=not body.single)
            except ApiError as err:  # a question too long in pairs: named pairs[N].question
                if err.status != 422 or body.single:
                    raise
                raise under_pairs(err) from None
        out = [legacy_json(a, i.top_k) for a, i in zip(answers, body.items, strict=True)]
        return out[0] if body.single else out

    @app.post(
        "/v1/explain",
        responses=errors,
        openapi_extra=_body_schema("ExplainItem"),
        summary="Where the start/end queries attend (DyREx, DyReF; static heads: the "
        "start/end distributions)",
    )
    async def explain(request: Request, item: ExplainItem = explain_request) -> Any:
        async with disconnect_watch(request) as gone:
            return await service.explain(item.question, item.context, gone)

    if documents is not None:
        add_document_routes(app, documents, errors)

    @app.get(
        "/health", response_model=Health, responses={503: {"model": Health}}, summary="Liveness"
    )
    async def health() -> Response:
        # a model that failed its warm-up never answers: dead to a liveness probe, which
        # then restarts the server, rather than alive and refusing every request
        if service.status == "failed":
            return JSONResponse({"status": "failed"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready", response_model=Readiness, responses={503: {"model": Readiness}})
    async def ready() -> Response:
        body = {
            "status": service.status,
            "model": service.info,
            "explain": service.explain_kind,
            "api_key_required": settings.api_key is not None,
            "max_context_chars": settings.max_context_chars,
            "max_questions": settings.max_questions,
            "max_body_bytes": settings.max_body_bytes,
            "index": None if documents is None else documents.info,
        }
        return JSONResponse(body, status_code=200 if service.status == "ready" else 503)

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(
            STATIC / "index.html",
            headers={"Content-Security-Policy": "default-src 'self'; img-src 'self' data:"},
        )

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(
        EdgeGuard,
        max_body_bytes=settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        api_key=settings.api_key,
        allowed_hosts=settings.allowed_hosts,
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "Authorization", "X-API-Key"],
            expose_headers=["Retry-After"],  # so a page can honour the 503's back-off
        )
    app.add_middleware(HttpMetrics, metrics=metrics, route_of=route_label)
    return app


def _body_schema(name: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{name}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _add_docs(app: FastAPI) -> None:
    """/docs from local assets, and the request schemas the routes read themselves."""
    import swagger_ui_bundle
    from fastapi.openapi.utils import get_openapi
    from pydantic import TypeAdapter

    from structqa.serving.schemas import AnswerBody, ExplainItem

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="structqa API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            template = "#/components/schemas/{model}"
            for name, kind in (("AnswerRequest", AnswerBody), ("ExplainItem", ExplainItem)):
                body = TypeAdapter(kind).json_schema(ref_template=template)
                components.update(body.pop("$defs", {}))
                components[name] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _json_error(err: ApiError) -> Response:
    return Response(
        error_body(err.status, err.message, err.fields),
        status_code=err.status,
        headers=err.headers,
        media_type="application/json",
    )


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> Response:
        return _json_error(err)

    async def unparsed(request: Request) -> ApiError | None:
        """The body's own fault (empty, not UTF-8, not JSON), said as POST /v1/answer says
        it, for the routes whose body FastAPI parses (/v1/search, /v1/ask); only for a body
        that was read whole (one cut short or too large is answered by its own error)."""
        body = getattr(request, "_body", None)
        if body is None:
            return None
        try:
            parse_json(body)
        except ApiError as err:
            return err
        return None

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> Response:
        errors = err.errors()
        if any(e["type"] == "json_invalid" or tuple(e["loc"]) == ("body",) for e in errors):
            if (body_error := await unparsed(request)) is not None:
                return _json_error(body_error)
        fields = validation_fields(errors)
        text = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return _json_error(ApiError(422, text, fields=fields))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> Response:
        method, path = request.method, request.url.path
        try:
            check_text(path)
        except ValueError:
            path = "(path)"
        if err.status_code == 404:
            msg = (
                f"no route {method} {path}; the API: POST /v1/answer, POST /v1/explain, "
                "GET /health, /ready, /metrics, /docs (and POST /v1/search, /v1/ask when the "
                "server was started with --index)"
            )
        elif err.status_code == 400 and isinstance(err.__cause__, ApiError):
            return _json_error(err.__cause__)  # the edge's 413 or 408 while the body was read
        elif err.status_code == 400 and isinstance(err.__cause__, ClientDisconnect):
            return _json_error(ApiError(CLIENT_GONE, "the client closed the connection"))
        elif err.status_code == 400 and (body_error := await unparsed(request)) is not None:
            return _json_error(body_error)
        elif err.status_code == 405:
            allowed = (err.headers or {}).get("Allow", "")
            msg = f"{method} is not allowed on {path}; allowed: {allowed}"
        else:
            msg = str(err.detail)
        return _json_error(ApiError(err.status_code, msg, dict(err.headers or {})))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, err: ClientDisconnect) -> Response:  # noqa: ARG001
        # the client left while its body was read: no server fault (once logged and counted
        # as a 500 with a traceback, so client timeouts raised the error-rate alerts)
        return _json_error(ApiError(CLIENT_GONE, "the client closed the connection"))

    @app.exception_handler(Exception)
    async def crashed(request: Request, err: Exception) -> Response:
        ref = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s %s", ref, request.method, request.url.path, exc_info=err)
        return _json_error(
            ApiError(500, f"internal error; the server logged it as {ref}. Please report it.")
        )
