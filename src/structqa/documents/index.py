"""A document index on disk: chunks in SQLite, their BM25 index (bm25s) and their sentence
embeddings (faiss), searched by BM25, by embedding or by both fused: ``hybrid`` is a convex
combination of the two scores, each min-max normalized over its top 100 (Bruch et al. 2023,
"An Analysis of Fusion Functions for Hybrid Retrieval", found it above reciprocal rank fusion,
``rrf``, and it is here on SciFact, SQuAD-open and COVID-QA: docs/results/documents/). BM25's
weight is 0.5 (best recall@5 on SQuAD training-pool questions against the SQuAD-open index, a
validation set), or the weight `structqa fit-fusion` fitted on an index's labelled questions
(``fusion.json``).

The folder holds ``chunks.sqlite`` (files with their content hash, documents, chunks with
their text, page and character offsets), the chunks' unit vectors keyed by chunk id (in
``dense.faiss``, an exact inner-product index, by default; or a Qdrant collection:
:mod:`structqa.documents.vectors`) and ``bm25/``; by default no server. Re-indexing embeds only
the chunks of new and changed files (by content hash) and drops those of deleted files; files
indexed earlier under paths not given this time are kept unless ``prune``; BM25 is rebuilt from
the chunk texts (seconds for 100k chunks). An update makes its work durable every few minutes
(a checkpoint: the vectors saved, then the database committed), so a stopped one (Ctrl-C, a
crash) loses only what it did since; ``updating`` names the chunks whose vectors may disagree
with the database (written before the vectors change), and the next update removes them and
embeds their files again, then goes on from the last checkpoint.

The dense encoder is the sentence encoder as shipped (all-MiniLM-L6-v2, mean pooling, 256
tokens), never a reader fine-tuned for spans: fine-tuning changes what its pooled states mean.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from structqa.data.hygiene import has_readable_text
from structqa.documents import lexical
from structqa.documents.folders import files_under
from structqa.documents.index_files import (
    IndexReport,
    encoder_dimension,
    encoder_name,
    id_spans,
    kept_note,
    moved_from,
    not_given,
    unreadable_note,
)
from structqa.documents.index_folder import (
    INDEX_FILE,
    UPDATING_FILE,
    check_new,
    index_record,
    not_an_index,
    require_index,
)
from structqa.documents.ingest import (
    ReadReport,
    chunk_document,
    not_read_here,
    read_all,
)
from structqa.documents.mixing import FUSION_POOL, pooled
from structqa.documents.vectors import COLLECTION, VectorStore, open_store
from structqa.io import write_text
from structqa.manifest import file_sha256

log = logging.getLogger(__name__)

RETRIEVERS = ("bm25", "dense", "hybrid", "rrf")
BM25_WEIGHT = 0.5  # hybrid: BM25's share of the combined score, unless the index has a fit
FUSION_FILE = "fusion.json"  # {"bm25_weight": w, ...}: written by `structqa fit-fusion`
ENCODER_TOKENS = 256  # all-MiniLM-L6-v2's limit; chunks are cut to fit it
CHUNK_TOKENS = ENCODER_TOKENS - 2  # [CLS] and [SEP]
#: what ``index.json`` records of how the chunks were made: an index whose readers were older
#: (a smaller number, or none recorded: 1) has every file read and chunked again by its next
#: update, so that fixes to the readers reach it. 2: chunks without a character a model reads
#: are left out
READERS_VERSION = 2
_READERS = str(READERS_VERSION)
EMBED_BATCH = 512  # chunks embedded between progress updates
# an update's checkpoints: at least this many seconds apart, and at least CHECKPOINT_COST times
# as long as the last one took (saving a large faiss index takes a while)
CHECKPOINT_SECONDS = 120.0
CHECKPOINT_COST = 10
# chunk ids are never reused (autoincrement): a server still searching the version opened
# before an update finds an old id missing, never another file's chunk under it
_SCHEMA = """
create table if not exists files (path text primary key, sha256 text not null);
create table if not exists origins (path text primary key, cwd text not null);
create table if not exists chunks (
    id integer primary key autoincrement, path text not null, doc_id text not null,
    title text not null, start integer not null, end integer not null, page integer,
    text text not null);
create index if not exists chunks_path on chunks(path);
create table if not exists meta (key text primary key, value text not null);
"""


@dataclass(frozen=True)
class Hit:
    """A retrieved chunk: its text, where it comes from, and its score under the retriever."""

    chunk_id: int
    doc_id: str
    title: str
    source: str
    start: int
    end: int
    page: int | None
    text: str
    score: float


def _encoder():
    from structqa.calibration.similarity import SentenceEncoder
    from structqa.paths import default_encoder_path

    return SentenceEncoder(str(default_encoder_path()), max_tokens=ENCODER_TOKENS, cache=False)


class DocumentIndex:
    """An index folder (see the module docstring): :meth:`update` from files, :meth:`search`.

    ``DocumentIndex(INDEX)`` opens an index (a folder that is none is refused, as a mistyped
    name is: FileNotFoundError); ``create=True`` makes a new one where the folder is missing
    or empty, as ``structqa index`` does (a folder of other files is refused, ValueError,
    before anything is written in it), then :meth:`update` fills it."""

    def __init__(
        self, directory: str | Path, encoder=None, store: str | None = None, create: bool = False
    ) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"{directory} is a file; give a folder for the index")
        recorded = index_record(self.directory)
        if recorded is None:
            if not create:
                raise not_an_index(self.directory)
            check_new(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        kept = recorded.get("store", "faiss") if recorded else None
        if store and kept and store != kept:
            raise ValueError(
                f"{directory}: its vectors are in {kept!r}, not {store!r}; build a new "
                "index to move them"
            )
        self.store_spec = store or kept or "faiss"
        self.recorded = recorded or {}
        self.db = sqlite3.connect(self.directory / "chunks.sqlite")
        self.db.executescript(_SCHEMA)
        self.collection = self._collection(made=recorded is not None)
        self._encoder = encoder
        self._dense: VectorStore | None = None
        self._bm25 = None
        self.bm25_weight = self.fusion_weight(self.directory / FUSION_FILE)

    @staticmethod
    def fusion_weight(fusion: Path) -> float:
        """BM25's share of the hybrid score: the fitted one (``fusion.json``), else the default."""
        if not fusion.is_file():
            return BM25_WEIGHT
        try:
            weight = float(json.loads(fusion.read_text())["bm25_weight"])
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{fusion}: not a fusion fit ({type(err).__name__}: {err}); run `structqa "
                "fit-fusion` again, or delete the file to use the default weight"
            ) from None
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"{fusion}: bm25_weight {weight} is not between 0 and 1")
        return weight

    def _collection(self, made: bool) -> str:
        """The Qdrant collection of this index's vectors: named once, when the index is made,
        and kept in its database (an index ``made`` before: the one name all shared)."""
        row = self.db.execute("select value from meta where key = 'collection'").fetchone()
        if row is not None:
            return str(row[0])
        name = COLLECTION if made else f"{COLLECTION}_{uuid.uuid4().hex[:16]}"
        self.db.execute("insert into meta values ('collection', ?)", (name,))
        self.db.commit()
        return name

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            encoder = _encoder()
            self._check_dimension(encoder)
            self._encoder = encoder
        return self._encoder

    def _check_dimension(self, encoder: Any) -> None:
        """Refuse an encoder whose vectors are not the size of the index's (faiss failed
        with a bare assertion)."""
        wanted = self.recorded.get("dimension")
        if wanted is None:
            return
        got = encoder_dimension(encoder)
        if got != wanted:
            raise ValueError(
                f"{self.directory}: its vectors have {wanted} dimensions "
                f"({self.recorded.get('encoder', 'another encoder')}), this encoder's {got}; "
                "build the index again with this encoder (`structqa index FOLDER --out NEW`)"
            )

    @property
    def dense(self) -> VectorStore:
        if self._dense is None:
            dim = None if self.recorded else encoder_dimension(self.encoder)
            self._dense = open_store(self.directory, self.store_spec, dim, self.collection)
        return self._dense

    @classmethod
    def open(cls, directory: str | Path, encoder=None) -> DocumentIndex:
        interrupted = require_index(directory)
        if interrupted:
            log.warning(
                "%s: its last update stopped before it finished, so some chunks may be missing "
                "or out of date; run `structqa index` on it again",
                directory,
            )
        return cls(directory, encoder)

    def documents(self) -> set[str]:
        """The ids of the documents the index holds (``FILE#KEY`` for a SQuAD/MRQA context)."""
        return {r[0] for r in self.db.execute("select distinct doc_id from chunks")}

    def __len__(self) -> int:
        return self.db.execute("select count(*) from chunks").fetchone()[0]

    def close(self) -> None:
        """Release the database and the vector store (an embedded Qdrant takes one client)."""
        if self._dense is not None:
            self._dense.close()
            self._dense = None
        self.db.close()

    def __enter__(self) -> DocumentIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- building ----------------------------------------------------------------------

    def update(
        self,
        paths: Sequence[str | Path],
        progress: Callable[[int, int], None] | None = None,
        exclude: Sequence[str | Path] = (),
        prune: bool = False,
        checkpoint_seconds: float | None = None,
    ) -> IndexReport:
        """Index the files under ``paths`` (``exclude``: folders left out): new and changed
        ones (by content hash) are chunked and embedded, deleted ones dropped, and those
        still on disk outside ``paths`` kept as indexed (``report.kept``) unless ``prune``;
        files that cannot be read, folders that cannot be listed and links to nothing are
        skipped and reported (what was indexed from them is kept). ``progress(chunks
        embedded, chunks to embed)``. Checkpoints every ``checkpoint_seconds`` (default
        :data:`CHECKPOINT_SECONDS`; 0: after every file): the next update goes on from the
        last. Stopped (Ctrl-C, an error), the database's uncommitted changes are rolled back
        at once: an index object kept after the stop does not hold its write lock."""
        try:
            return self._update(paths, progress, exclude, prune, checkpoint_seconds)
        except BaseException:
            self.db.rollback()
            # the vectors and BM25 in memory took part of the update: read them from disk
            # again, as the database now is (reused, they wrote vectors of rolled-back ids)
            if self._dense is not None:
                self._dense.close()
                self._dense = None
            self._bm25 = None
            raise

    def _update(
        self,
        paths: Sequence[str | Path],
        progress: Callable[[int, int], None] | None,
        exclude: Sequence[str | Path],
        prune: bool,
        checkpoint_seconds: float | None,
    ) -> IndexReport:
        t0 = time.perf_counter()
        every = CHECKPOINT_SECONDS if checkpoint_seconds is None else checkpoint_seconds
        walk_skipped: list[tuple[str, str]] = []
        files = files_under(paths, exclude, walk_skipped)
        kept = [Path(p) for p, _ in walk_skipped]  # what was indexed from them stays
        report = IndexReport(ReadReport())
        dense = self.dense
        self._resume(dense)
        # Qdrant takes each write at once: ``updating`` names the chunks before each; faiss's
        # file changes at checkpoints only (a first build, marked throughout, is a new index)
        immediate = self.store_spec != "faiss"
        if immediate or not self.recorded:
            self._mark(set())
        known = dict(self.db.execute("select path, sha256 from files"))
        if self._stale(known):
            log.warning(
                "%s: made by older document readers; every file is read, chunked and embedded "
                "again (this once)",
                self.directory,
            )
            # (marked in the database, so that an update stopped part way goes on from there)
            self.db.execute("update files set sha256 = 'stale ' || sha256")
            self.db.execute("insert or replace into meta values ('reread', ?)", (_READERS,))
            known = {path: f"stale {digest}" for path, digest in known.items()}
        origins = dict(self.db.execute("select path, cwd from origins"))
        gone, report.kept = not_given(known, files, kept, paths, prune, origins)
        todo = []
        for f in files:
            if (why := not_read_here(f)) is not None:  # (a film is not hashed to be skipped)
                report.read.skipped.append((str(f), why))
                continue
            try:
                digest = file_sha256(f)
            except OSError as err:
                report.read.skipped.append((str(f), f"cannot be read ({err})"))
                continue
            if known.get(str(f)) == digest:
                report.unchanged_files += 1
            elif str(f) not in known and (was := moved_from(gone.get(digest, []), f)):
                self._move(was, str(f))  # moved, or typed from elsewhere: the same reader
                report.moved_files += 1
            else:
                todo.append((f, digest))
        dropped: list[int] = []
        for path in sorted(p for paths in gone.values() for p in paths):
            dropped += self._drop(path)
            on_disk = os.path.exists(os.path.join(origins.get(path, ""), path))
            there = "not under the paths given" if on_disk else "no longer on disk"
            report.removed.append((path, there))
        count, digests = self._count_tokens, {str(f): digest for f, digest in todo}
        chunked = []  # (file, its chunk rows): every new file read and cut first ...
        for path, docs in read_all([f for f, _ in todo], report.read):
            rows, unreadable = [], []
            for doc in docs:
                for c in chunk_document(doc, count, CHUNK_TOKENS):
                    # (a PDF page of glyphs without Unicode: the reader refuses such a text,
                    # and every question that retrieved it failed)
                    row = (str(path), doc.doc_id, doc.title, c.start, c.end, c.page, c.text)
                    if has_readable_text(c.text):
                        rows.append(row)
                    else:
                        unreadable.append(c)
            if unreadable:
                report.read.notes.append((str(path), unreadable_note(unreadable)))
            chunked.append((path, rows))
        for path in report.read.empty:  # a file emptied is a change: its chunks go
            dropped += self._drop(path)
            self.db.execute("insert or replace into files values (?, ?)", (path, digests[path]))
            self._origin(path)
        report.read.skipped = [  # a changed file that no longer reads keeps its old text
            (f, f"{why}{kept_note(f in known, f in report.read.empty)}")
            for f, why in report.read.skipped
        ] + walk_skipped
        touched = set(dropped)  # the chunks whose vectors change before the next checkpoint
        if immediate:
            self._mark(touched)
        dense.remove(dropped)
        total, done = sum(len(rows) for _, rows in chunked), 0
        last, cost = time.perf_counter(), 0.0
        for path, rows in chunked:  # ... then embedded, with progress over the chunks
            old = self._drop(str(path))
            ids = self._insert(rows)
            touched.update(old, ids)
            if immediate:
                self._mark(touched)
            dense.remove(old)
            for start in range(0, len(rows), EMBED_BATCH):
                part = rows[start : start + EMBED_BATCH]
                vectors = self.encoder([r[-1] for r in part]).astype(np.float32)
                dense.add(np.asarray(ids[start : start + EMBED_BATCH], dtype=np.int64), vectors)
                done += len(part)
                if progress is not None:
                    progress(done, total)
            known_now = (str(path), digests[str(path)])
            self.db.execute("insert or replace into files values (?, ?)", known_now)
            self._origin(str(path))
            report.added_files += 1
            now = time.perf_counter()
            if now - last >= (max(every, CHECKPOINT_COST * cost) if every else 0):
                self._checkpoint(dense, touched)
                last = time.perf_counter()
                cost = last - now
        self._checkpoint(dense, touched)
        self._build_bm25()
        report.chunks = len(self)
        report.seconds = time.perf_counter() - t0
        meta = {
            "encoder": encoder_name(self.encoder),
            "dimension": encoder_dimension(self.encoder),
            "readers": READERS_VERSION,
            "store": self.store_spec,
            "collection": self.collection if self.store_spec != "faiss" else None,
            "chunk_tokens": CHUNK_TOKENS,
            "chunks": report.chunks,
            "files": self.db.execute("select count(*) from files").fetchone()[0],
        }
        write_text(self.directory / INDEX_FILE, json.dumps(meta, indent=2))
        self.recorded = meta
        (self.directory / UPDATING_FILE).unlink()  # every store written: the index is whole
        return report

    def _stale(self, known: dict[str, str]) -> bool:
        """Whether the files indexed were read by older readers (and not yet marked so by an
        update that stopped part way)."""
        made = self.recorded.get("readers", 1) if self.recorded else READERS_VERSION
        row = self.db.execute("select value from meta where key = 'reread'").fetchone()
        return bool(known) and made < READERS_VERSION and (row is None or row[0] != _READERS)

    def _mark(self, touched: set[int]) -> None:
        """Write ``updating`` (before the vectors change on disk): an update is writing the
        index, and the vectors of the chunks ``touched`` may disagree with the database."""
        record = {"uncertain": id_spans(touched), "about": "an update is writing this index"}
        write_text(self.directory / UPDATING_FILE, json.dumps(record) + "\n")

    def _checkpoint(self, dense: VectorStore, touched: set[int]) -> None:
        """Make the update's work so far durable: the chunks ``touched`` named, the vectors
        saved, the database committed, then the names cleared (a stop between the two leaves
        them named for the next update)."""
        self._mark(touched)
        dense.save()
        self.db.commit()
        self._mark(set())
        touched.clear()

    def _resume(self, dense: VectorStore) -> None:
        """After an update that stopped (``updating`` is there): the chunks it named are
        removed from both stores, with their files' other chunks, so that their files are
        embedded again; a mark written before updates could go on has every file indexed
        afresh."""
        updating = self.directory / UPDATING_FILE
        if not updating.is_file():
            return
        try:
            named = json.loads(updating.read_text(encoding="utf-8"))["uncertain"]
            uncertain = [i for lo, hi in named for i in range(lo, hi + 1)]
        except (ValueError, KeyError, TypeError):
            log.warning(
                "%s: the last update stopped before it finished; indexing every file afresh",
                self.directory,
            )
            uncertain = [r[0] for r in self.db.execute("select id from chunks")]
            self.db.execute("delete from chunks")
            self.db.execute("delete from files")
            self.db.execute("delete from origins")
            dense.reset()
        else:
            log.warning(
                "%s: the last update stopped before it finished; going on from its last "
                "checkpoint%s",
                self.directory,
                f" (the files of {len(uncertain)} chunks it was writing again)"
                if uncertain
                else "",
            )
            if not uncertain:
                return
            self.db.execute("create temp table if not exists named (id integer primary key)")
            self.db.executemany("insert or ignore into named values (?)", [(i,) for i in uncertain])
            query = "select distinct path from chunks where id in (select id from named)"
            paths = [r[0] for r in self.db.execute(query).fetchall()]
            self.db.execute("delete from named")
            uncertain += [i for path in paths for i in self._drop(path)]
            dense.remove(uncertain)
        self._checkpoint(dense, set(uncertain))

    def _count_tokens(self, texts: Sequence[str]) -> list[int]:
        ids = self.encoder.tokenizer(list(texts), add_special_tokens=False, verbose=False)[
            "input_ids"
        ]
        return [len(x) for x in ids]

    def _insert(self, rows: list[tuple]) -> list[int]:
        ids = []
        for row in rows:
            cur = self.db.execute(
                "insert into chunks (path, doc_id, title, start, end, page, text) "
                "values (?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            ids.append(int(cur.lastrowid))
        return ids

    def _move(self, old: str, new: str) -> None:
        """A file indexed as ``old`` is now ``new`` with the same content: its chunks and
        vectors stay; the path, the document ids made from it and a title that was its
        name follow it."""
        n = len(old)
        self.db.execute(
            "update chunks set doc_id = ? || substr(doc_id, ?) where path = ? and "
            "substr(doc_id, 1, ?) = ?",
            (new, n + 1, old, n, old),
        )
        self.db.execute(
            "update chunks set title = ? where path = ? and title = ?",
            (Path(new).stem, old, Path(old).stem),
        )
        self.db.execute("update chunks set path = ? where path = ?", (new, old))
        self.db.execute("update files set path = ? where path = ?", (new, old))
        self.db.execute("delete from origins where path = ?", (old,))
        self._origin(new)

    def _origin(self, path: str) -> None:
        """Keep the directory a relative ``path`` was typed from (found from elsewhere later)."""
        if not os.path.isabs(path):
            self.db.execute("insert or replace into origins values (?, ?)", (path, os.getcwd()))

    def _drop(self, path: str) -> list[int]:
        """Remove ``path`` from the database; its chunk ids, whose vectors the caller removes."""
        ids = [r[0] for r in self.db.execute("select id from chunks where path = ?", (path,))]
        self.db.execute("delete from chunks where path = ?", (path,))
        self.db.execute("delete from files where path = ?", (path,))
        self.db.execute("delete from origins where path = ?", (path,))
        return ids

    def _build_bm25(self) -> None:
        rows = self.db.execute("select id, text from chunks order by id").fetchall()
        self._bm25 = lexical.build(self.directory, rows)

    # ---- searching ---------------------------------------------------------------------

    def search(self, query: str, k: int = 10, retriever: str = "hybrid") -> list[Hit]:
        """The ``k`` best chunks for ``query`` by ``retriever`` (bm25, dense or hybrid)."""
        if not query.strip():
            raise ValueError("the query is empty: give the words to search for")
        return self.search_many([query], k, retriever)[0]

    def search_many(
        self, queries: Sequence[str], k: int = 10, retriever: str = "hybrid"
    ) -> list[list[Hit]]:
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever {retriever!r}: one of {', '.join(RETRIEVERS)}")
        if k < 1:
            raise ValueError(f"k={k}: ask for 1 or more chunks")
        if not len(self):
            return [[] for _ in queries]
        ranked: list[list[tuple[int, float]]]
        if retriever == "bm25":
            ranked = self._bm25_ranked(queries, k)
        elif retriever == "dense":
            ranked = self._dense_ranked(queries, k)
        else:
            both = self.ranked_both(queries, max(k, FUSION_POOL))
            weight = self.bm25_weight if retriever == "hybrid" else None
            ranked = [pooled(s, d, weight) for s, d in both]
        return [self._hits(r[:k]) for r in ranked]

    def ranked_both(
        self, queries: Sequence[str], depth: int = 100
    ) -> list[tuple[list[tuple[int, float]], list[tuple[int, float]]]]:
        """Each query's (BM25, dense) rankings of ``depth`` chunks: (chunk id, score), best
        first."""
        sparse, dense = self._bm25_ranked(queries, depth), self._dense_ranked(queries, depth)
        return list(zip(sparse, dense, strict=True))

    def _bm25_ranked(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        if self._bm25 is None:
            self._bm25 = lexical.load(self.directory)
        return lexical.ranked(self._bm25, queries, k)

    def _dense_ranked(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        return self.dense.search(self.encoder(list(queries)).astype(np.float32), k)

    def _hits(self, ranked: list[tuple[int, float]]) -> list[Hit]:
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = {
            r[0]: r
            for r in self.db.execute(
                f"select id, doc_id, title, path, start, end, page, text from chunks "
                f"where id in ({marks})",
                [i for i, _ in ranked],
            )
        }
        # (an index built before such chunks were left out may hold chunks a reader refuses)
        return [
            Hit(*rows[i][:7], rows[i][7], score)
            for i, score in ranked
            if i in rows and has_readable_text(rows[i][7])
        ]

    def doc_ids(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """The document id of each chunk id (those in the index)."""
        out: dict[int, str] = {}
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), 900):  # SQLite's limit on bound parameters
            part = ids[start : start + 900]
            marks = ",".join("?" * len(part))
            out.update(
                self.db.execute(f"select id, doc_id from chunks where id in ({marks})", part)
            )
        return out
