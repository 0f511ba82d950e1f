"""What an update of a document index does with the files it indexed earlier (kept, dropped,
moved), how it names the chunks a stopped update may have left half-written, and the notes it
writes about them (:mod:`structqa.documents.index`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from structqa.documents.ingest import Chunk, ReadReport, reader_kind


@dataclass
class IndexReport:
    read: ReadReport
    added_files: int = 0
    unchanged_files: int = 0
    moved_files: int = 0  # the same content under a new path: kept, not embedded again
    chunks: int = 0
    seconds: float = 0.0
    #: files whose chunks were dropped, with why: gone from disk, or not given with ``prune``
    removed: list[tuple[str, str]] = field(default_factory=list)
    #: files indexed earlier, still on disk but not under the paths given: kept as indexed
    kept: list[str] = field(default_factory=list)

    @property
    def removed_files(self) -> int:
        return len(self.removed)

    def summary(self, details: bool = True) -> str:
        return (
            f"{self.read.summary(details)}\n{self.added_files} files indexed (new or changed), "
            f"{self.unchanged_files} unchanged, "
            + (f"{self.moved_files} moved (kept as indexed), " if self.moved_files else "")
            + (f"{len(self.kept)} kept (not under the paths given), " if self.kept else "")
            + f"{self.removed_files} removed; "
            f"{self.chunks} chunks in the index ({self.seconds:.1f} s)"
        )


def kept_note(known: bool, empty: bool) -> str:
    """What an update did with what it indexed earlier of a file it skipped."""
    if not known:
        return ""
    return (
        "; its chunks indexed earlier are dropped"
        if empty
        else "; the version indexed earlier is kept"
    )


def not_given(
    known: dict[str, str],
    files: Sequence[Path],
    kept: Sequence[Path],
    paths: Sequence[str | Path],
    prune: bool,
    origins: dict[str, str] | None = None,
) -> tuple[dict[str, list[str]], list[str]]:
    """Of the files indexed earlier and not among ``files`` (nor under ``kept``: folders not
    listed), by content hash those to drop (or move: gone from disk, under ``paths`` but not
    listed, or any with ``prune``), and those kept (on disk, outside ``paths``). A path
    typed elsewhere (``docs/a.txt``, ``/home/me/docs/a.txt``) is the file: moved, not kept.
    A relative path is looked for from the directory it was typed in (``origins``, where the
    index recorded it), else from this one."""
    present = {str(f) for f in files}
    given: list[str] | None = None  # real paths, found only when needed
    listed: set[str] = set()
    gone: dict[str, list[str]] = {}
    outside = []
    for path, digest in sorted(known.items()):
        if path in present or any(Path(path).is_relative_to(k) for k in kept):
            continue
        where = os.path.join((origins or {}).get(path, ""), path)
        if not prune and os.path.exists(where):
            if given is None:
                given = [os.path.realpath(p) for p in paths]
                listed = {os.path.realpath(f) for f in files}
            real = os.path.realpath(where)
            if real not in listed and not any(Path(real).is_relative_to(g) for g in given):
                outside.append(path)
                continue
        gone.setdefault(digest, []).append(path)
    return gone, outside


def id_spans(ids: set[int]) -> list[list[int]]:
    """``ids`` as sorted [first, last] runs (the ids of a file's chunks run on)."""
    out: list[list[int]] = []
    for i in sorted(ids):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def moved_from(candidates: list[str], new: Path) -> str | None:
    """The first of ``candidates`` (paths no longer given, with ``new``'s content) that the
    same reader read (a.txt renamed a.html must be read again), taken from the list."""
    for i, old in enumerate(candidates):
        if reader_kind(old) == reader_kind(new):
            return candidates.pop(i)
    return None


def encoder_dimension(encoder: Any) -> int:
    """The size of the encoder's vectors (one text embedded)."""
    return int(encoder(["dimension"]).shape[1])


def encoder_name(encoder: Any) -> str:
    """The encoder's folder (by default the shipped all-MiniLM-L6-v2's), else its type."""
    path = getattr(encoder, "path", None)
    return str(path) if path else type(encoder).__name__


def unreadable_note(chunks: Sequence[Chunk]) -> str:
    where = sorted({c.page for c in chunks if c.page is not None})
    pages = f" (page {', '.join(map(str, where[:10]))}{' ...' if len(where) > 10 else ''})"
    return (
        f"{len(chunks)} chunk(s) without a character a model reads left out{pages if where else ''}"
        ": a PDF's glyphs with no Unicode text, or only symbols; save such pages as text to "
        "index them"
    )
