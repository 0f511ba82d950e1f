"""The service over a document index (``structqa serve --index INDEX``).

POST /v1/search  {query, top_k?, retriever?} -> the best chunks, with their sources
POST /v1/ask     {question, top_k_chunks?, retriever?, answers?} -> answers across the
                 documents, ranked and merged as ``structqa ask`` ranks them, with the sources

The index (SQLite, bm25s, the vector store and the sentence encoder for queries) lives on one
thread of its own, as SQLite connections must; a search runs there. The reading of the retrieved
chunks goes through the same micro-batcher, queue limit and deadline as POST /v1/answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from structqa.documents import no_answer
from structqa.documents.ask import decide, ranked
from structqa.documents.index import (
    FUSION_FILE,
    INDEX_FILE,
    RETRIEVERS,
    UPDATING_FILE,
    DocumentIndex,
    Hit,
)
from structqa.serving.edge import disconnect_watch
from structqa.serving.parsing import ApiError
from structqa.serving.schemas import MAX_QUERY_CHARS, ErrorOut, check_text

log = logging.getLogger(__name__)

MAX_TOP_K = 100
MAX_CHUNKS_READ = 50
Retriever = Literal[RETRIEVERS]  # type: ignore[valid-type]  # the index's, one list for both
RETRIEVER_TEXT = "bm25, dense, hybrid (both scores combined) or rrf (rank fusion)"
QUERY_LIMIT = f"at most {MAX_QUERY_CHARS:,} characters"


class SearchBody(BaseModel):
    """A search of the index."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr = Field(
        description=f"what to look for ({QUERY_LIMIT})",
        max_length=MAX_QUERY_CHARS,
        examples=["Who won Super Bowl 50?"],
    )
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K, description="how many chunks to return")
    retriever: Retriever = Field("hybrid", description=RETRIEVER_TEXT)

    @field_validator("query")
    @classmethod
    def _readable(cls, value: str) -> str:
        return check_text(value)


class AskBody(BaseModel):
    """A question over the whole index."""

    model_config = ConfigDict(extra="forbid")

    question: StrictStr = Field(
        description=f"the question ({QUERY_LIMIT}, and no more tokens than the model reads: "
        "data.max_query_len)",
        max_length=MAX_QUERY_CHARS,
        examples=["Who won Super Bowl 50?"],
    )
    top_k_chunks: StrictInt = Field(
        10, ge=1, le=MAX_CHUNKS_READ, description="retrieved chunks the reader reads"
    )
    retriever: Retriever = Field("hybrid", description=RETRIEVER_TEXT)
    answers: StrictInt = Field(5, ge=1, le=20, description="how many answers to return")

    @field_validator("question")
    @classmethod
    def _readable(cls, value: str) -> str:
        return check_text(value)


def hit_json(h: Hit) -> dict[str, Any]:
    return {
        "chunk_id": h.chunk_id,
        "doc_id": h.doc_id,
        "title": h.title,
        "source": h.source,
        "page": h.page,
        "start": h.start,
        "end": h.end,
        "score": h.score,
        "text": h.text,
    }


class DocumentService:
    """An open index on a thread of its own, reopened when `structqa index`, `fit-fusion` or
    `fit-no-answer` has changed it on disk (checked at each request: a few file stats)."""

    def __init__(
        self, directory: str | Path, reader: str | Path | None = None, runtime: str | None = None
    ) -> None:
        self.directory = Path(directory)
        self.reader, self.runtime = reader, runtime
        # the served reader as loaded: a calibration rewritten on disk later changes its
        # manifest, not the answers this process gives, so fits are matched to this identity
        self.reader_id = None if reader is None else no_answer.reader_id(reader)
        self.fitted = self._fit()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index")
        self._seen = self._on_disk()
        self.chunks = 0  # counted on the index's thread (SQLite's) as it is opened: /ready
        # reads this, never waiting on that thread (a search or a reopen holds it for seconds)
        self.index: DocumentIndex = self._thread.submit(self._open).result()

    def _fit(self) -> no_answer.SetThreshold | None:
        """The index's set-level no-answer fit, where it was made for this reader (it applies
        to requests with its retriever and number of chunks)."""
        fitted = None if self.reader is None else no_answer.load(self.directory)
        if fitted is not None and fitted.reader != self.reader_id:
            log.warning("%s: fitted for another reader; not used", self.directory)
            return None
        if fitted is not None:
            no_answer.warn_if_other_runtime(fitted, self.runtime)
        return fitted

    def _on_disk(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What the index's files are now: (inode, mtime, size) of the files an update or a
        fit rewrites last (each is replaced whole, so a new inode)."""
        out = []
        for name in (INDEX_FILE, FUSION_FILE, no_answer.FILE):
            try:
                st = (self.directory / name).stat()
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def _open(self, encoder=None) -> DocumentIndex:
        index = DocumentIndex.open(self.directory, encoder)
        # load the retrievers now, not on the first request: the first search would wait
        index.search("warm up", 1, "hybrid")
        self.chunks = len(index)
        return index

    def _current(self) -> DocumentIndex:
        """The index as on disk: reopened (the sentence encoder kept) after an update or a fit
        finished. While an update is still writing, the index opened before it answers (its
        retrievers as they were; the chunks' texts as the database has them by then)."""
        if (self.directory / UPDATING_FILE).exists():
            return self.index
        now = self._on_disk()
        if now == self._seen:
            return self.index
        self._seen = now  # tried once per change on disk, whatever comes of it
        try:
            fresh = self._open(self.index._encoder)
        except Exception as err:  # a broken index on disk: keep serving the one in memory
            log.error(
                "%s changed but cannot be opened (%s); serving it as before", self.directory, err
            )
            return self.index
        try:
            fitted = self._fit()
        except (OSError, ValueError) as err:
            log.error("%s: its no-answer fit cannot be read (%s); not used", self.directory, err)
            fitted = None
        old, self.index, self.fitted = self.index, fresh, fitted
        old.close()
        log.info("%s changed on disk: reopened (%d chunks)", self.directory, len(fresh))
        return fresh

    def _search(self, query: str, k: int, retriever: str) -> list[Hit]:
        return self._current().search(query, k, retriever)

    @property
    def info(self) -> dict[str, Any]:
        chunks = self.chunks  # as now served
        fit = self.fitted
        decision = (
            "per passage"
            if fit is None
            else f"set-level ({fit.retriever}, {fit.top_k_chunks} chunks)"
        )
        # the index folder's name, never the server's path
        return {"name": self.directory.name, "chunks": chunks, "no_answer": decision}

    def submit(self, query: str, k: int, retriever: str) -> Future:
        """The search on the index's thread (its future: a caller gives up on it at its
        deadline or when its client leaves)."""
        return self._thread.submit(self._search, query, k, retriever)

    def close(self) -> None:
        self._thread.submit(lambda: self.index.close()).result()  # the one open by then
        self._thread.shutdown()


def add_document_routes(app: FastAPI, docs: DocumentService, errors: dict) -> None:
    """POST /v1/search and POST /v1/ask on ``app`` (whose state holds the reading service)."""

    async def searched(
        query: str, k: int, retriever: str, deadline: float, gone: asyncio.Future | None
    ) -> list[Hit]:
        """The hits of a search on the index's thread, by ``deadline`` (its time measured)."""
        service = app.state.service
        t0 = time.perf_counter()
        try:  # (timed out, abandoned or failed searches counted too: the slowest ones)
            return await service.within(docs.submit(query, k, retriever), deadline, gone)
        finally:
            service.metrics.search_seconds.observe(time.perf_counter() - t0)

    @app.post("/v1/search", responses=errors, summary="The best chunks of the index for a query")
    async def search(body: SearchBody, request: Request) -> Response:
        service = app.state.service
        deadline = time.monotonic() + service.settings.request_timeout
        async with disconnect_watch(request) as gone:
            with service.admitted_request():  # (a client gone or timed out frees its place)
                hits = await searched(body.query, body.top_k, body.retriever, deadline, gone)
        return JSONResponse({"query": body.query, "hits": [hit_json(h) for h in hits]})

    @app.post(
        "/v1/ask",
        responses=errors | {404: {"model": ErrorOut}},
        summary="Answer a question from the documents of the index, with the sources",
    )
    async def ask(body: AskBody, request: Request) -> Response:
        service = app.state.service
        deadline = time.monotonic() + service.settings.request_timeout  # search and reading
        async with disconnect_watch(request) as gone:
            with service.admitted_request():
                # a question the reader would refuse is refused before the search
                await service.check_question(body.question, deadline, gone)
                hits = await searched(
                    body.question, body.top_k_chunks, body.retriever, deadline, gone
                )
            try:
                pairs = [(body.question, h.text) for h in hits]
                read = await service.answer(pairs, gone, deadline) if pairs else []
            except ApiError as err:
                if err.status == 422:  # the question is too long: one question here
                    raise ApiError(
                        422, err.message, fields=[{"field": "question", "message": err.message}]
                    ) from None
                raise
        fitted = docs.fitted
        if fitted is not None and fitted.applies_to(
            fitted.reader, body.retriever, body.top_k_chunks, docs.index.bm25_weight
        ):  # one decision over the retrieved set
            result = decide(ranked(body.question, hits, read, forced=True), fitted.threshold)
        else:
            result = ranked(body.question, hits, read)
        # whether the probabilities come from a map fitted on validation questions
        calibrated = any(a.calibrated for a in read)
        body_out = result.to_json(body.answers) | {"calibrated": calibrated}
        return JSONResponse(body_out | {"model": service.info})
