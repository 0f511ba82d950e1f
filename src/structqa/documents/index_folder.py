"""What makes a folder a document index, and what may become one: an index is known by the
keys of its ``index.json``, never by the file's name alone (another program's ``index.json``
was once taken for an index and its folder written into); a new index is made only in a
folder that is missing, empty, or holds what a first build that stopped wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the file that makes a folder a document index (:mod:`structqa.documents.index`), with the
#: keys every index has written in it since the first: a folder holding it is never read as
#: documents, also where the index was built inside the folder it indexes
INDEX_FILE = "index.json"
INDEX_KEYS = frozenset(("encoder", "chunk_tokens", "chunks", "files"))
# present while an update writes its stores, naming the chunks whose vectors may disagree
# with the database (the database and the vectors are two stores, made durable together at
# each checkpoint): the next update removes those chunks' files from both and indexes them
# again (a file without that list, from an older version: every file afresh), and a search
# warns until then
UPDATING_FILE = "updating"
# what a first build writes in its folder before index.json (one stopped leaves them): a
# folder holding them alone is a new index's
OWN_FILES = frozenset(
    ("chunks.sqlite", "chunks.sqlite-journal", "dense.faiss", "dense.faiss.tmp", "bm25")
    + ("bm25.old", "bm25.tmp", "qdrant", UPDATING_FILE)
)


def index_record(directory: str | Path) -> dict[str, Any] | None:
    """What ``directory/index.json`` records of a document index, or None where the folder
    holds no such file or one of another program's (not JSON, or without an index's keys)."""
    meta = Path(directory) / INDEX_FILE
    if not meta.is_file():
        return None
    try:
        record = json.loads(meta.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and INDEX_KEYS <= record.keys() else None


def require_index(directory: str | Path) -> bool:
    """FileNotFoundError unless ``directory`` is a document index (a check of a file, for a
    command to make before it loads a reader); whether its last update was interrupted."""
    if index_record(directory) is None:
        raise not_an_index(Path(directory))
    return (Path(directory) / UPDATING_FILE).is_file()


def not_an_index(directory: Path) -> FileNotFoundError:
    """The error for a folder that is not a document index (an index is known by the keys of
    its ``index.json``, never by the file's name alone), saying how to make one."""
    meta = directory / INDEX_FILE
    if (directory / UPDATING_FILE).is_file() and not meta.exists():
        return FileNotFoundError(
            f"{directory}: its first build stopped before it finished; run "
            f"`structqa index FOLDER --out {directory}` again"
        )
    if meta.is_file():
        keys = ", ".join(sorted(INDEX_KEYS))
        why = f"its {INDEX_FILE} is not a document index's, which holds {keys}"
    else:
        why = f"no {INDEX_FILE}" if directory.is_dir() else "no such folder"
    return FileNotFoundError(
        f"{directory}: not a document index ({why}); build one with `structqa index FOLDER "
        f"--out {directory}` (in Python: DocumentIndex({str(directory)!r}, "
        "create=True).update([FOLDER]))"
    )


def check_new(directory: Path) -> None:
    """ValueError unless a new index may be made in ``directory``: missing, empty (hidden
    files aside) or holding only what a first build that stopped wrote."""
    if not directory.is_dir():
        return
    if (directory / INDEX_FILE).is_file():
        what = f"its {INDEX_FILE} is not a document index's (another program's?)"
    else:
        other = sorted(
            p.name for p in directory.iterdir() if p.name[:1] != "." and p.name not in OWN_FILES
        )
        if not other:
            return
        what = f"it holds {', '.join(other[:3])}{' ...' if len(other) > 3 else ''}"
    raise ValueError(
        f"{directory}: not a document index, and {what}: the index's files would be mixed with "
        "them; give a new or empty folder for the index (structqa index PATH --out NEW)"
    )
