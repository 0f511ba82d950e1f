"""The files of the folders given to a document index: walked with os.walk (pathlib's rglob
passes over a folder it cannot list without a word), hidden files and folders left out, links
to folders outside followed once, document indexes left out, and what cannot be reached (or
named in the index's database: a name that is not UTF-8) named with its reason."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from structqa.documents.index_folder import index_record

log = logging.getLogger(__name__)

# said of a folder or link left out by the walk: an update keeps what it indexed from there
KEPT = "; anything indexed from it earlier is kept"
# said of a name the index cannot keep: its database holds paths as text (UTF-8)
NOT_UTF8 = (
    "is not valid UTF-8 (shown with its bytes as \\xNN), and the index keeps paths as text; "
    "rename it in UTF-8 (convmv -f latin1 -t utf8 --notest NAME) and index again"
)


def shown(path: str | Path) -> str:
    """``path`` as text that can be printed and stored: the bytes of a name that are not
    UTF-8 (Python's surrogate escapes) as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _utf8(path: str | Path) -> bool:
    """Whether ``path``'s name is valid UTF-8 (an undecodable byte is a lone surrogate)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def files_under(
    paths: Sequence[str | Path],
    exclude: Sequence[str | Path] = (),
    skipped: list[tuple[str, str]] | None = None,
) -> list[Path]:
    """Every file under ``paths`` (folders recursively, hidden ones left out), sorted; a file
    reached through two of the paths (``docs docs/a.txt``) is listed once. A folder behind a
    link is read once where it lies outside the folder (a link within it, or to a folder above
    it, is not followed: its files are read where they are, or are not the folder's). Left out:
    the folders ``exclude`` names and every document index (an index built inside the folder
    it indexes once read its own files as documents on every update). A folder that cannot be
    listed, a link to nothing and a name that is not UTF-8 are appended to ``skipped`` as (path,
    why): once left out in silence, a re-index took their files for deleted ones and dropped
    them; a name not UTF-8 stopped the update in the database, naming no file."""
    out: list[Path] = []
    said = skipped if skipped is not None else []
    for p in map(Path, paths):
        if not _utf8(p) and p.exists():
            kind = "folder" if p.is_dir() else "file"
            said.append((shown(p), f"a {kind} whose name {NOT_UTF8}"))
        elif p.is_dir():
            left_out = {Path(x).resolve() for x in exclude}
            out += _walk(p, left_out, said)
        elif p.is_file():
            out.append(p)
        elif p.is_symlink():
            raise FileNotFoundError(f"{p}: {_dead_link(p)}")
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for f in out:
        if (real := f.resolve()) not in seen:
            seen.add(real)
            unique.append(f)
    return unique


def _walk(top: Path, left_out: set[Path], skipped: list[tuple[str, str]]) -> list[Path]:
    """The files under ``top`` for :func:`files_under` (os.walk: pathlib's rglob passes over
    a folder it cannot list without a word)."""

    def unlisted(err: OSError) -> None:
        why = err.strerror or type(err).__name__
        skipped.append((str(err.filename), f"a folder that cannot be listed ({why}){KEPT}"))

    home = top.resolve()
    found: list[Path] = []
    visited: set[Path] = set()  # real folders walked: two links to one are read once
    for root, dirs, names in os.walk(top, onerror=unlisted, followlinks=True):
        here = Path(root)
        real = here.resolve()
        if real in visited or any(real.is_relative_to(d) for d in left_out):
            dirs[:] = []
            continue
        visited.add(real)
        if index_record(here) is not None:
            log.info("%s: left out, a document index and not documents", here)
            dirs[:] = []
            continue
        for d in dirs:
            if not d.startswith(".") and not _utf8(d):
                skipped.append((shown(here / d), f"a folder whose name {NOT_UTF8}"))
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and _utf8(d) and _follow(here / d, home)
        )
        for name in names:
            f = here / name
            if name.startswith("."):
                continue
            if f.is_file():
                if any(f.resolve().is_relative_to(d) for d in left_out):
                    continue
                if _utf8(name):
                    found.append(f)
                else:
                    skipped.append((shown(f), f"a name that {NOT_UTF8}"))
            elif f.is_symlink() and not f.exists():  # (a link to a folder is in ``dirs``)
                skipped.append((shown(f), f"{_dead_link(f)}{KEPT}"))
    return sorted(found)


def _follow(folder: Path, home: Path) -> bool:
    """Whether the walk of ``home`` goes into ``folder``: a real folder, or a link to one
    outside ``home`` (a link within it would read its files under a second name, unless they
    lie in a hidden folder the walk passes over; one to a folder above it, that whole
    folder)."""
    if not folder.is_symlink():
        return True
    target = folder.resolve()
    if target.is_relative_to(home):  # (unless the walk passes over it: a hidden folder)
        return any(part.startswith(".") for part in target.relative_to(home).parts)
    if home.is_relative_to(target):
        log.warning("%s: a link to %s, a folder above %s: not followed", folder, target, home)
        return False
    return True


def _dead_link(link: Path) -> str:
    """Why a link leads to no file: its target is missing, or it leads round in a loop."""
    try:
        link.resolve(strict=True)
    except RuntimeError:  # (Python 3.11 and 3.12's "Symlink loop")
        return f"a link to {os.readlink(link)} that leads round in a loop"
    except OSError as err:
        if err.errno == errno.ELOOP:  # (3.13's)
            return f"a link to {os.readlink(link)} that leads round in a loop"
    return f"a link to {os.readlink(link)}, which does not exist"
