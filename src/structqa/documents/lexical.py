"""An index folder's BM25 half (bm25s, English Snowball stemming): built from the chunk texts
into ``bm25/`` with the chunk ids beside it, and searched.

The folder is written whole, then swapped in (:func:`structqa.io.replace_dir`, which also
clears a ``bm25.old`` an earlier crash left): BM25 and its chunk ids written in place, one
after the other, could be left apart by a crash between the two, and a search then mapped
BM25's hits to other chunks until the next update.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from structqa.io import replace_dir

FOLDER = "bm25"
IDS_FILE = "chunk_ids.npy"
#: a loaded BM25 index and the chunk id of each of its documents
Lexical = tuple[Any, np.ndarray]


def bm25s_module() -> Any:
    """bm25s, its logger quieted (it sets itself to DEBUG when imported)."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def stemmer() -> Any:
    """English Snowball stemming for BM25 (PyStemmer), as the published BM25 baselines use."""
    import Stemmer

    return Stemmer.Stemmer("english").stemWords


def build(directory: Path, rows: Sequence[tuple[int, str]]) -> Lexical | None:
    """BM25 over ``rows`` (chunk id, text), written to ``directory/bm25`` whole; None (and
    no folder) for no rows: bm25s cannot save an empty index, and a search of none finds none."""
    out = directory / FOLDER
    if not rows:
        shutil.rmtree(out, ignore_errors=True)
        return None
    bm25s = bm25s_module()
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    retriever = bm25s.BM25()
    tokens = bm25s.tokenize([r[1] for r in rows], stemmer=stemmer(), show_progress=False)
    retriever.index(tokens, show_progress=False)
    tmp = directory / f"{FOLDER}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    retriever.save(str(tmp), show_progress=False)
    np.save(tmp / IDS_FILE, ids)
    replace_dir(tmp, out)
    return retriever, ids


def load(directory: Path) -> Lexical:
    """The BM25 index :func:`build` wrote, its two parts read from one version: a folder
    swapped while they were read (an update beside a server) is read again. One that a
    crash left mid-swap is read where it lies (``bm25.old``), not moved: putting it back is
    the next update's, which could be under way in another process."""
    path = directory / FOLDER
    for _ in range(5):
        where = path if path.is_dir() else path.with_name(FOLDER + ".old")
        try:
            before = os.stat(where).st_ino
            loaded = bm25s_module().BM25.load(str(where)), np.load(where / IDS_FILE)
            if os.stat(where).st_ino == before:
                return loaded
        except FileNotFoundError:  # removed as it was read (the swap's last step): again
            if not (path.is_dir() or path.with_name(FOLDER + ".old").is_dir()):
                raise
    raise RuntimeError(f"{path}: replaced again and again while read; try again")


def ranked(lexical: Lexical, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
    """Each query's best ``k`` chunks by BM25: (chunk id, score), best first, score > 0."""
    bm25s = bm25s_module()
    retriever, ids = lexical
    tokens = bm25s.tokenize(list(queries), stemmer=stemmer(), return_ids=False, show_progress=False)
    k = min(k, len(ids))
    docs, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    return [
        [(int(ids[d]), float(s)) for d, s in zip(row, srow, strict=True) if s > 0]
        for row, srow in zip(docs, scores, strict=True)
    ]
