"""Questions over a collection of documents: files read into chunks with their offsets
(:mod:`~structqa.documents.ingest`), an index on disk searched by BM25, by sentence embedding
or both (:mod:`~structqa.documents.index`), and retrieval scored as BEIR scores it
(:mod:`~structqa.documents.metrics`)."""

from structqa.documents.index import RETRIEVERS, DocumentIndex, Hit
from structqa.documents.mixing import combine, fuse

__all__ = ["RETRIEVERS", "DocumentIndex", "Hit", "combine", "fuse"]
