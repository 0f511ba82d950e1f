"""Updating an index keeps what a user did not ask to lose: files indexed earlier under a folder
not given this time stay (``--prune`` drops them), and an update stopped part way keeps the
files it committed, so running it again embeds only the rest."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_documents import BEES, VOLCANO

from structqa.calibration.similarity import SentenceEncoder
from structqa.cli import main
from structqa.documents import DocumentIndex
from structqa.documents import index as index_module
from structqa.documents.vectors import FaissStore

NILE = "The Nile flows north through Egypt to the Mediterranean Sea."
SAHARA = "The Sahara is a large desert in Africa."


@pytest.fixture
def four(small: Path) -> Path:
    """``small`` and two more files; a folder walk gives bees, etna, nile, sahara."""
    (small / "nile.txt").write_text(NILE, encoding="utf-8")
    (small / "sahara.txt").write_text(SAHARA, encoding="utf-8")
    return small


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], list[str]]]:
    """The real sentence encoder, recording the texts it embeds; ``stop_at(word)`` has the
    call embedding a text with ``word`` in it raise KeyboardInterrupt (Ctrl-C), None not."""
    texts: list[str] = []
    stop: list[str | None] = [None]
    real = SentenceEncoder.__call__

    def recording(self: SentenceEncoder, batch):  # noqa: ANN001, ANN202
        if stop[0] is not None and any(stop[0] in t for t in batch):
            raise KeyboardInterrupt
        texts.extend(batch)
        return real(self, batch)

    monkeypatch.setattr(SentenceEncoder, "__call__", recording)

    def stop_at(word: str | None) -> list[str]:
        stop[0] = word
        texts.clear()
        return texts

    yield stop_at


def _whole(out: Path, sources: dict[str, str]) -> None:
    """Every chunk has its vector once, and each query finds its file by embedding."""
    with DocumentIndex.open(out) as index:
        assert len(index.dense) == len(index) == len(sources)
        for query, name in sources.items():
            hits = index.search(query, k=len(sources), retriever="dense")
            assert hits[0].source.endswith(name), (query, hits)
            assert len({h.chunk_id for h in hits}) == len(hits) == len(sources)
    assert not (out / "updating").exists()


def _goes_on(
    out: Path,
    folder: Path,
    embedded: Callable[[str | None], list[str]],
    sources: dict[str, str],
) -> list[str]:
    """Update ``out`` from ``folder`` again after a stop: one file indexed again, three
    unchanged, the index whole (:func:`_whole`); the texts that update embedded."""
    texts = embedded(None)
    with DocumentIndex(out) as index:
        report = index.update([folder])
    assert (report.added_files, report.unchanged_files) == (1, 3)
    seen = list(texts)
    _whole(out, sources)
    return seen


def test_a_folder_not_given_again_is_kept_and_dropped_only_with_prune(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    more = tmp_path / "more"
    more.mkdir()
    (more / "sahara.txt").write_text(SAHARA, encoding="utf-8")
    out = tmp_path / "index"
    monkeypatch.chdir(tmp_path)
    assert main(["index", "docs", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["index", str(more), "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "1 files indexed (new or changed), 0 unchanged, 2 kept" in said.out
    assert "kept 2 file(s) indexed earlier under docs, not under the PATHs given" in said.err
    assert "--prune" in said.err and "removed" not in said.err
    with DocumentIndex.open(out) as index:
        assert {h.source for h in index.search("waggle dance volcano desert", 9, "bm25")} == {
            "docs/bees.txt",
            "docs/etna.txt",
            f"{more}/sahara.txt",
        }
    # the same folder typed another way is the same files: moved, not kept beside themselves
    assert main(["index", str(small), str(more), "--out", str(out), "--no-progress"]) == 0
    assert "2 moved (kept as indexed), 0 removed; 3 chunks" in capsys.readouterr().out
    (small / "etna.txt").unlink()  # deleted: dropped and named, whatever the paths given
    assert main(["index", str(more), "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert f"removed {small}/etna.txt from the index: no longer on disk" in said.err
    assert "1 kept (not under the paths given), 1 removed" in said.out
    assert main(["index", str(more), "--out", str(out), "--no-progress", "--prune"]) == 0
    said = capsys.readouterr()
    assert f"removed {small}/bees.txt from the index: not under the paths given" in said.err
    with DocumentIndex.open(out) as index:
        assert index.documents() == {f"{more}/sahara.txt"}
        assert len(index.dense) == 1


def test_a_first_build_stopped_part_way_goes_on_without_embedding_again_what_it_committed(
    four: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    embedded: Callable[[str | None], list[str]],
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setattr(index_module, "CHECKPOINT_SECONDS", 0)  # a checkpoint after each file
    out = tmp_path / "index"
    embedded("Nile")  # Ctrl-C while the third file is embedded
    assert main(["index", str(four), "--out", str(out), "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="first build stopped before it finished"):
        DocumentIndex.open(out)
    texts = embedded(None)
    assert main(["index", str(four), "--out", str(out), "--no-progress"]) == 0
    assert "2 files indexed (new or changed), 2 unchanged" in capsys.readouterr().out
    assert NILE in texts and SAHARA in texts
    assert BEES not in texts and VOLCANO not in texts  # committed before the stop
    _whole(
        out,
        {
            "a volcano in Sicily": "etna.txt",
            "a desert in Africa": "sahara.txt",
            "bees dance": "bees.txt",
            "a river in Egypt": "nile.txt",
        },
    )


def test_a_stop_between_saving_the_vectors_and_committing_is_set_right_by_the_next_run(
    small: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    embedded: Callable[[str | None], list[str]],
) -> None:
    """The vectors of the file being written are on disk, its chunks are not: the next run
    removes those vectors (their ids are given to the next chunks) and embeds it again."""
    out = tmp_path / "index"
    with DocumentIndex(out, create=True) as index:
        index.update([small])
    (small / "nile.txt").write_text(NILE, encoding="utf-8")
    (small / "sahara.txt").write_text(SAHARA, encoding="utf-8")
    saves = []
    real_save = FaissStore.save

    def saved_then_stopped(self: FaissStore) -> None:
        real_save(self)
        saves.append(len(self))
        if len(saves) == 2:  # the second checkpoint, after sahara: before its commit
            raise KeyboardInterrupt

    with monkeypatch.context() as patch, DocumentIndex(out) as index:
        patch.setattr(FaissStore, "save", saved_then_stopped)
        with pytest.raises(KeyboardInterrupt):
            index.update([small], checkpoint_seconds=0)
    assert saves == [3, 4]
    sources = {
        "a volcano in Sicily": "etna.txt",
        "a desert in Africa": "sahara.txt",
        "bees dance": "bees.txt",
        "a river in Egypt": "nile.txt",
    }
    texts = _goes_on(out, small, embedded, sources)
    assert SAHARA in texts and NILE not in texts and BEES not in texts


def test_a_stopped_update_of_a_qdrant_index_goes_on_from_its_last_checkpoint(
    small: Path,
    tmp_path: Path,
    embedded: Callable[[str | None], list[str]],
) -> None:
    """Qdrant takes each write at once: the chunks of the file being written are named
    before it, so the next run removes what it wrote and embeds that file alone again."""
    out = tmp_path / "index"
    with DocumentIndex(out, store="qdrant", create=True) as index:
        index.update([small])
    sleep = "Bumblebees sleep in flowers at night."
    (small / "bees.txt").write_text(sleep, encoding="utf-8")
    (small / "nile.txt").write_text(NILE, encoding="utf-8")
    (small / "sahara.txt").write_text(SAHARA, encoding="utf-8")
    embedded("Sahara")  # after bees (changed) and nile, while sahara is embedded
    with DocumentIndex(out) as index, pytest.raises(KeyboardInterrupt):
        index.update([small], checkpoint_seconds=0)
    sources = {
        "a volcano in Sicily": "etna.txt",
        "a desert in Africa": "sahara.txt",
        "where bumblebees sleep": "bees.txt",
        "a river in Egypt": "nile.txt",
    }
    texts = _goes_on(out, small, embedded, sources)
    assert SAHARA in texts and NILE not in texts and sleep not in texts


def test_a_relative_path_indexed_from_another_directory_is_found_and_kept(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    more = tmp_path / "more"
    more.mkdir()
    (more / "sahara.txt").write_text(SAHARA, encoding="utf-8")
    out = tmp_path / "index"
    monkeypatch.chdir(tmp_path)
    assert main(["index", "docs", "--out", str(out), "--no-progress"]) == 0  # relative paths
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where "docs/bees.txt" is not
    capsys.readouterr()
    assert main(["index", str(more), "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "2 kept" in said.out and "removed" not in said.err
    with DocumentIndex.open(out) as index:
        assert index.documents() == {"docs/bees.txt", "docs/etna.txt", f"{more}/sahara.txt"}
    (small / "etna.txt").unlink()  # deleted: found missing from where it was typed
    assert main(["index", str(more), "--out", str(out), "--no-progress"]) == 0
    assert "removed docs/etna.txt from the index: no longer on disk" in capsys.readouterr().err
