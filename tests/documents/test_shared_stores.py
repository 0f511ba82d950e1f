"""Indexes that share a Qdrant server keep their vectors apart: each index names its own
collection when it is made (chunk ids start at 1 in every index, so indexes in one collection
overwrote each other's points)."""

from __future__ import annotations

from pathlib import Path

import pytest
import qdrant_client
from test_documents import BEES, VOLCANO

from structqa.documents import DocumentIndex
from structqa.documents.vectors import COLLECTION


class _Server(qdrant_client.QdrantClient):
    """Qdrant's own engine in memory, reached by every client as one server would be (a
    client's close leaves the server up)."""

    def close(self, **kwargs) -> None:  # noqa: ARG002
        return None


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> _Server:
    shared = _Server(":memory:")
    real = qdrant_client.QdrantClient

    def connect(*args, url: str | None = None, **kwargs):
        return shared if url else real(*args, **kwargs)

    monkeypatch.setattr(qdrant_client, "QdrantClient", connect)
    return shared


def _one_file(folder: Path, text: str) -> Path:
    folder.mkdir()
    (folder / "doc.txt").write_text(text, encoding="utf-8")
    return folder


def test_two_indexes_on_one_server_keep_their_own_vectors(tmp_path: Path, server) -> None:
    bees = _one_file(tmp_path / "bees", BEES)
    etna = _one_file(tmp_path / "etna", VOLCANO)
    spec = "qdrant:http://qdrant.example:6333"
    with DocumentIndex(tmp_path / "a", store=spec, create=True) as a:
        a.update([bees])
    with DocumentIndex(tmp_path / "b", store=spec, create=True) as b:
        b.update([etna])
    names = {c.name for c in server.get_collections().collections}
    assert len(names) == 2 and all(n.startswith(COLLECTION + "_") for n in names)
    asked = (
        (tmp_path / "a", "how do bees tell each other", "bees"),
        (tmp_path / "b", "a volcano in Sicily", "etna"),
    )
    for folder, query, source in asked:
        with DocumentIndex.open(folder) as index:
            assert len(index.dense) == len(index) == 1
            (hit,) = index.search(query, k=5, retriever="dense")
            assert Path(hit.source).parent.name == source
    with DocumentIndex.open(tmp_path / "a") as a:  # emptying one leaves the other whole
        a.update([])
    with DocumentIndex.open(tmp_path / "b") as b:
        assert len(b.dense) == 1


def test_the_collection_is_named_once_and_kept(tmp_path: Path) -> None:
    folder = _one_file(tmp_path / "docs", BEES)
    with DocumentIndex(tmp_path / "index", store="qdrant", create=True) as index:
        index.update([folder])
        name = index.collection
    with DocumentIndex.open(tmp_path / "index") as again:
        assert again.collection == name != COLLECTION
        assert len(again.dense) == 1


def test_an_index_made_before_collections_were_named_keeps_the_shared_name(
    tmp_path: Path,
) -> None:
    folder = _one_file(tmp_path / "docs", BEES)
    with DocumentIndex(tmp_path / "index", create=True) as index:
        index.update([folder])
        assert index.collection != COLLECTION
        index.db.execute("drop table meta")  # the database as an older version left it
        index.db.commit()
    with DocumentIndex.open(tmp_path / "index") as index:
        assert index.collection == COLLECTION
    with DocumentIndex.open(tmp_path / "index") as index:
        assert index.collection == COLLECTION  # recorded now


def test_an_embedded_store_open_elsewhere_is_a_clear_error(tmp_path: Path) -> None:
    folder = _one_file(tmp_path / "docs", BEES)
    with DocumentIndex(tmp_path / "index", store="qdrant", create=True) as served:
        served.update([folder])  # (a server holds the store open like this)
        with pytest.raises(ValueError, match="open in another process") as err:
            DocumentIndex.open(tmp_path / "index").update([folder])
        assert "--store faiss or --store qdrant:URL" in str(err.value)
