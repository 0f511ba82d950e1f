"""Where a document index keeps its chunks' sentence embeddings: faiss files beside the index
(the default, no server), or a Qdrant collection, the same code scaled out to a cluster.

Why Qdrant: its Python client runs the same API embedded in the process (``QdrantClient
(path=...)``, files on disk, which the tests and CI use) and against a server or cluster
(``QdrantClient(url=...)``), so one code path serves both; Milvus's embedded mode
(milvus-lite) starts a server binary of its own. The store is chosen when the index is
built (``structqa index --store faiss|qdrant|qdrant:URL``) and recorded in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from structqa.io import write_bytes

STORES = ("faiss", "qdrant")  # and qdrant:URL, a Qdrant server or cluster
# the collection of an index built before each index named its own (on a server, indexes
# sharing one name overwrote each other's vectors: points are keyed by chunk id, which starts at
# 1 in every index); a new index's is this name and a random suffix, kept in its database
COLLECTION = "structqa_chunks"


class VectorStore(Protocol):
    """Unit vectors keyed by chunk id, searched by inner product (cosine)."""

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    def remove(self, ids: Sequence[int]) -> None: ...

    def reset(self) -> None:
        """Remove every vector (an interrupted update is redone from nothing)."""
        ...

    def search(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]: ...

    def save(self) -> None: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...


class FaissStore:
    """An exact inner-product faiss index keyed by chunk id, in ``dense.faiss``."""

    def __init__(self, directory: Path, dim: int | None) -> None:
        import faiss

        self.path = directory / "dense.faiss"
        if self.path.is_file():
            try:
                self.index = faiss.read_index(str(self.path))
            except RuntimeError as err:  # (faiss's C++ errors: a file cut short or altered)
                why = str(err).rsplit("Error: ", 1)[-1].strip()
                raise ValueError(
                    f"{self.path}: not a readable faiss index ({why}), so the index's vectors "
                    f"are lost; delete {directory} and build it again (`structqa index FOLDER "
                    f"--out {directory}`, FOLDER: the folders it indexed)"
                ) from None
        elif dim is None:
            raise FileNotFoundError(
                f"{self.path}: missing, so the index has lost its vectors; delete {directory} "
                f"and build it again (`structqa index FOLDER --out {directory}`)"
            )
        else:
            self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.index.add_with_ids(vectors.astype(np.float32), ids.astype(np.int64))

    def remove(self, ids: Sequence[int]) -> None:
        if len(ids):
            self.index.remove_ids(np.asarray(ids, dtype=np.int64))

    def reset(self) -> None:
        self.index.reset()

    def search(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        k = min(k, self.index.ntotal)
        if k <= 0:
            return [[] for _ in vectors]
        scores, ids = self.index.search(vectors.astype(np.float32), k)
        return [
            [(int(i), float(s)) for i, s in zip(row, srow, strict=True) if i >= 0]
            for row, srow in zip(ids, scores, strict=True)
        ]

    def save(self) -> None:
        """Written whole and on disk before it replaces the file (a power cut leaves the old
        one or the new, never a file cut short)."""
        import faiss

        write_bytes(self.path, faiss.serialize_index(self.index).tobytes())

    def close(self) -> None:
        """(Nothing held open.)"""

    def __len__(self) -> int:
        return int(self.index.ntotal)


class QdrantStore:
    """A Qdrant collection of the chunks' vectors: embedded (files in ``INDEX/qdrant``) or on
    a server or cluster (``url``), through the same client API; ``collection`` is the index's
    own, so that indexes sharing a server keep apart."""

    def __init__(
        self,
        directory: Path,
        dim: int | None,
        url: str | None = None,
        collection: str = COLLECTION,
    ) -> None:
        from qdrant_client import QdrantClient, models

        self.models = models
        self.collection = collection
        try:
            # check_compatibility: the client's own version check warned "Failed to obtain
            # server version" (from a thread, at any moment) beside the clear error below
            self.client = (
                QdrantClient(url=url, check_compatibility=False)
                if url
                else QdrantClient(path=str(directory / "qdrant"))
            )
        except RuntimeError as err:  # an embedded store takes one client at a time
            if url or "already accessed" not in str(err):
                raise
            raise ValueError(
                f"{directory}: its vectors (an embedded Qdrant store) are open in another "
                "process, such as `structqa serve --index` or another `structqa index`: stop "
                "it first; an index updated while it is served keeps its vectors with --store "
                "faiss or --store qdrant:URL"
            ) from None
        try:
            exists = self.client.collection_exists(self.collection)
        except Exception as err:  # qdrant-client wraps httpx's and grpc's errors its own ways
            if not url:
                raise
            raise ConnectionError(
                f"cannot reach the Qdrant server at {url} ({type(err).__name__}: {err}); start "
                "it, check the URL, or keep the vectors in the index folder (--store faiss or "
                "--store qdrant)"
            ) from None
        if not exists:
            if dim is None:
                raise FileNotFoundError(f"{url or directory}: no {self.collection} collection")
            self.client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=dim, distance=models.Distance.DOT),
            )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        points = [
            self.models.PointStruct(id=int(i), vector=v.astype(float).tolist())
            for i, v in zip(ids, vectors, strict=True)
        ]
        for start in range(0, len(points), 512):
            self.client.upsert(self.collection, points=points[start : start + 512])

    def remove(self, ids: Sequence[int]) -> None:
        if len(ids):
            selector = self.models.PointIdsList(points=[int(i) for i in ids])
            self.client.delete(self.collection, points_selector=selector)

    def reset(self) -> None:
        every = self.models.FilterSelector(filter=self.models.Filter())
        self.client.delete(self.collection, points_selector=every)

    def search(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        requests = [
            self.models.QueryRequest(query=v.astype(float).tolist(), limit=k) for v in vectors
        ]
        found = self.client.query_batch_points(self.collection, requests=requests)  # one round trip
        return [[(int(p.id), float(p.score)) for p in r.points] for r in found]

    def save(self) -> None:
        """(Qdrant persists every write itself.)"""

    def close(self) -> None:
        """Release the collection (an embedded one takes one client at a time)."""
        self.client.close()

    def __len__(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)


def open_store(
    directory: Path, spec: str, dim: int | None, collection: str = COLLECTION
) -> VectorStore:
    """The store ``spec`` names (``faiss``, ``qdrant``, ``qdrant:URL``) for the index in
    ``directory`` (a Qdrant one in ``collection``); ``dim`` creates it where it does not exist
    yet (None: it must)."""
    if spec == "faiss":
        return FaissStore(directory, dim)
    if spec == "qdrant":
        return QdrantStore(directory, dim, collection=collection)
    if spec.startswith("qdrant:"):
        return QdrantStore(directory, dim, url=spec.removeprefix("qdrant:"), collection=collection)
    raise ValueError(f"store {spec!r}: one of faiss, qdrant (embedded), qdrant:URL")
